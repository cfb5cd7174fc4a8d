import pytest

from tenure import PayloadError
from tenure._payload import MAX_DEPTH, decode, encode


@pytest.mark.parametrize(
    "value",
    [
        {"q": "'; DROP TABLE tenure_jobs;--"},
        {"text": "кириллица и emoji 🎉"},
        {"nested": [[[1, 2.5, None, True]]]},
        {"backslash-u": "\\u0000 is only text here"},
    ],
)
def test_json_values_encode(value: object) -> None:
    assert encode(value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"x": "a\x00b"}, "NUL"),
        ({"x": "\ud800"}, "not valid Unicode"),
        ({"x": float("nan")}, "JSON cannot represent"),
        ({"x": {1, 2}}, "not JSON"),
        ({1: "x"}, "non-string key"),
        ({"x": object()}, "not JSON"),
    ],
)
def test_non_json_is_refused_with_a_reason(value: object, reason: str) -> None:
    with pytest.raises(PayloadError, match=reason):
        encode(value)


def test_depth_and_size_are_capped() -> None:
    deep: object = "leaf"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(PayloadError, match="deeper"):
        encode(deep)
    with pytest.raises(PayloadError, match="limit is 10 bytes"):
        encode({"x": "0123456789"}, limit=10)


def test_text_from_outside_is_decoded_within_its_caps_before_it_is_parsed() -> None:
    """A body 100,000 brackets deep is refused by counting, not by exhausting the
    parser's recursion (json.loads raised RecursionError on it: a 500 at the webhook)."""
    assert decode(b'{"a": ["x]\\\\", "[[[", {"b": null}]}') == {"a": ["x]\\", "[[[", {"b": None}]}
    assert decode(b"") is None
    deep = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert decode(deep) is not None
    for hostile in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000, b"[" * (MAX_DEPTH + 1)):
        with pytest.raises(PayloadError, match="nested deeper than"):
            decode(hostile)
    for bad, reason in (
        (b"{not json", "not JSON"),
        (b"\xff", "not JSON"),
        (b'"\\u0000"', "NUL"),
        (b"NaN", "JSON cannot represent"),
        (b'"' + b'\\"' * 1000, "not JSON"),
    ):
        with pytest.raises(PayloadError, match=reason):
            decode(bad)
    with pytest.raises(PayloadError, match="limit is 4 bytes"):
        decode(b"[1,2]", limit=4)
