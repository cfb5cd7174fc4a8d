"""A tool's signature as its contract: what enqueue accepts and stores, what the tool is
called with, what the model is shown, and which return types are refused up front."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

import tenure
from tenure import Context


class Address(BaseModel):
    city: str
    zip: int


@dataclasses.dataclass
class Window:
    start: int
    end: int


class Options(TypedDict):
    deep: bool


def app_with(fn: Any) -> tenure.App:
    app = tenure.App("dbname=unused")
    app.tool()(fn)
    return app


async def book(
    ctx: Context,
    where: Address,
    window: Window,
    mode: Literal["fast", "slow"] = "fast",
    options: Options | None = None,
    tags: list[str] | None = None,
    json: str = "",  # a name pydantic's own models use: still just an argument
    _private: int = 0,  # a leading underscore: still just an argument
) -> Address:
    """Book a slot.

    The rest of the docstring is detail."""
    return where


def test_the_payload_is_checked_strictly_and_stored_as_validated_json() -> None:
    spec = app_with(book).tools["book"]
    stored = spec.validate(
        {"where": Address(city="Oslo", zip=150), "window": {"start": 1, "end": 2}, "_private": 3}
    )
    assert stored == (
        '{"_private":3,"where":{"city":"Oslo","zip":150},"window":{"end":2,"start":1}}'
    )
    with pytest.raises(tenure.PayloadError) as refused:
        spec.validate({"where": {"city": "Oslo", "zip": "150"}, "window": [1, 2], "mode": "x"})
    assert refused.value.problems == (
        "where.zip: Input should be a valid integer (got '150')",
        "window: Input should be an object (got [1, 2])",
        "mode: Input should be 'fast' or 'slow' (got 'x')",
    )
    for bad, problem in [
        ({"window": {"start": 1, "end": 2}}, "where: Field required"),
        ({"where": {"city": "a", "zip": 1}, "window": {"start": 1, "end": 2}, "who": 1}, "who:"),
        ({"where": {"city": "a", "zip": 1}, "window": {"start": True, "end": 2}}, "window.start"),
    ]:
        with pytest.raises(tenure.PayloadError) as refused:
            spec.validate(bad)
        assert refused.value.problems[0].startswith(problem), refused.value.problems
    with pytest.raises(tenure.PayloadError, match="must be a JSON object"):
        spec.validate(["not", "an", "object"])


def test_the_tool_is_called_with_the_objects_its_annotations_name() -> None:
    contract = app_with(book).tools["book"].contract
    args, kwargs = contract.call_arguments(
        {"where": {"city": "Oslo", "zip": 150}, "window": {"start": 1, "end": 2}}
    )
    assert args == ()
    assert kwargs["where"] == Address(city="Oslo", zip=150)
    assert kwargs["window"] == Window(1, 2)
    assert (kwargs["mode"], kwargs["options"], kwargs["json"], kwargs["_private"]) == (
        "fast",
        None,
        "",
        0,
    )
    assert contract.dump_result(Address(city="Oslo", zip=150)) == {"city": "Oslo", "zip": 150}
    with pytest.raises(ValueError):
        contract.dump_result({"city": "Oslo"})  # does not fit the return annotation


def test_untyped_tools_pass_their_json_straight_through() -> None:
    def plain(ctx: Context, a, b=2, /, *, c, **rest):  # type: ignore[no-untyped-def]
        return None

    contract = app_with(plain).tools["plain"].contract
    assert contract.plain and contract.positional == 2
    args, kwargs = contract.call_arguments({"a": 1, "c": 3, "extra": [4]})
    assert args == (1, 2) and kwargs == {"c": 3, "extra": [4]}
    assert contract.validate({"a": 1, "c": 3, "extra": [4]}) == '{"a":1,"c":3,"extra":[4]}'


def test_the_schema_is_what_a_model_is_shown() -> None:
    schema = app_with(book).tool_schema("book")
    assert schema["name"] == "book"
    assert schema["description"].startswith("Book a slot.")
    parameters = schema["parameters"]
    assert parameters["type"] == "object"
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["where", "window"]
    assert set(parameters["properties"]) == {
        "where", "window", "mode", "options", "tags", "json", "_private",
    }  # fmt: skip
    assert parameters["properties"]["mode"]["enum"] == ["fast", "slow"]
    assert "Address" in parameters["$defs"] and "Window" in parameters["$defs"]


def test_a_return_type_that_cannot_become_json_is_refused_at_registration() -> None:
    async def opens(ctx: Context) -> socket.socket:
        raise AssertionError("never called")

    with pytest.raises(tenure.PolicyError, match=r"its return type .* cannot become JSON"):
        app_with(opens)

    async def takes(ctx: Context, sock: socket.socket) -> None: ...

    with pytest.raises(tenure.PolicyError, match="arguments cannot be described as JSON"):
        app_with(takes)

    def star(ctx: Context, *args: int) -> None: ...

    with pytest.raises(tenure.PolicyError, match=r"\*args cannot be filled"):
        app_with(star)

    async def undefined(ctx: Context, x: NoSuchType) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(tenure.PolicyError, match="annotations cannot be resolved"):
        app_with(undefined)


def test_a_plan_is_checked_with_the_same_validator() -> None:
    app = app_with(book)
    with pytest.raises(tenure.PlanRejected) as rejected:
        app.dispatch_plan_sync([{"tool": "book", "arguments": {"where": "Oslo"}}])
    assert rejected.value.problems == (
        "step 1 (book): where: Input should be an object (got 'Oslo')",
        "step 1 (book): window: Field required",
    )
