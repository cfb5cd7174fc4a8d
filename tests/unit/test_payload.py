import pytest

from tenure import PayloadError
from tenure._payload import MAX_DEPTH, encode


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
