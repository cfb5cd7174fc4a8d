"""A waitpoint's declared answer: who may answer, the form its caller is asked with, and
what a reply must be to answer it (no database: the pure part of `tenure._waitpoint`)."""

from __future__ import annotations

import enum
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from tenure import PayloadError, PolicyError
from tenure._waitpoint import FORM_FIELD, answer_schema, fit_form, form_of, waitpoint

SECRET = b"s" * 32


class Approval(TypedDict):
    approved: bool
    note: str


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Pick(BaseModel):
    colour: Colour
    count: int = 1
    tags: list[Literal["a", "b"]] = []


class Nested(BaseModel):
    approval: Pick


def formed(answer: Any) -> tuple[dict[str, Any], bool]:
    found = form_of(answer_schema("wp", answer))
    assert found is not None
    return found


def test_an_object_of_primitives_is_its_own_form_and_a_primitive_is_one_field() -> None:
    form, wrapped = formed(Approval)
    assert not wrapped
    assert form == {
        "type": "object",
        "properties": {
            "approved": {"title": "Approved", "type": "boolean"},
            "note": {"title": "Note", "type": "string"},
        },
        "required": ["approved", "note"],
    }
    picked, _ = formed(Pick)
    assert picked["properties"]["colour"] == {
        "enum": ["red", "blue"],
        "title": "Colour",
        "type": "string",
    }  # an enum's $ref, resolved
    assert picked["properties"]["tags"]["items"]["enum"] == ["a", "b"]
    assert picked["required"] == ["colour"]
    one, wrapped = formed(bool)
    assert wrapped and one == {
        "type": "object",
        "properties": {FORM_FIELD: {"type": "boolean"}},
        "required": [FORM_FIELD],
    }


@pytest.mark.parametrize("answer", [Nested, dict[str, int], list[str], int | None, Any])
def test_what_no_form_can_ask_for_has_none(answer: Any) -> None:
    assert form_of(answer_schema("wp", answer)) is None


def test_a_caller_waitpoint_must_be_askable_and_defaults_to_a_line_of_text() -> None:
    with pytest.raises(PolicyError, match="asked with a form"):
        waitpoint(SECRET, 1, None, "wp", 60, "resume", answer=Nested, answered_by="caller")
    plain = waitpoint(SECRET, 1, None, "wp", 60, "resume", answered_by="caller")
    assert plain.answered_by == "caller" and plain.answer_schema == {"type": "string"}
    held = waitpoint(SECRET, 1, None, "wp", 60, "resume")
    assert held.answered_by == "holder" and held.answer_schema is None
    with pytest.raises(PolicyError, match="answered_by"):
        waitpoint(SECRET, 1, None, "wp", 60, "resume", answered_by="agent")  # type: ignore[arg-type]


def test_an_answer_reaches_the_tool_as_its_declared_type() -> None:
    seen = {"wp": {"answer": {"colour": "red", "count": 2}, "timed_out": False}}
    picked = waitpoint(SECRET, 1, seen, "wp", 60, "resume", answer=Pick)
    assert picked.answered and picked.answer == Pick(colour=Colour.RED, count=2)
    wrong = {"wp": {"answer": {"colour": "green"}, "timed_out": False}}
    with pytest.raises(PayloadError, match="does not fit its declared type"):
        waitpoint(SECRET, 1, wrong, "wp", 60, "resume", answer=Pick)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "holds no answer"),
        ({"approved": True}, "'note': required"),
        ({"approved": "yes", "note": "x"}, "'approved': not a boolean"),
        ({"approved": 1, "note": "x"}, "'approved': not a boolean"),
        ({"approved": True, "note": 5}, "'note': not a string"),
        ({"approved": True, "note": "x", "extra": 1}, "'extra': not a field"),
        ({"approved": True, "note": "nul\x00"}, "NUL character"),
        ({"approved": True, "note": "x" * 70_000}, "the limit is 65536 bytes"),
    ],
)
def test_a_reply_that_does_not_fit_the_form_is_refused_saying_why(
    content: Any, problem: str
) -> None:
    form, wrapped = formed(Approval)
    with pytest.raises(PayloadError, match=problem):
        fit_form(form, wrapped, content)


def test_a_reply_that_fits_is_the_answer() -> None:
    form, wrapped = formed(Approval)
    assert fit_form(form, wrapped, {"approved": True, "note": "ok"}) == {
        "approved": True,
        "note": "ok",
    }
    picked, wrapped = formed(Pick)
    with pytest.raises(PayloadError, match="of the choices"):
        fit_form(picked, wrapped, {"colour": "green"})
    one, wrapped = formed(Literal["yes", "no"])
    assert fit_form(one, wrapped, {FORM_FIELD: "yes"}) == "yes"
