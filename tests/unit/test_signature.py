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
    schema = app_with(book).registry.tool_schema("book")
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
        app.sync.dispatch_plan([{"tool": "book", "arguments": {"where": "Oslo"}}])
    assert rejected.value.problems == (
        "step 1 (book): where: Input should be an object (got 'Oslo')",
        "step 1 (book): window: Field required",
    )


def google(ctx: Context, customer_id: str, summary: str, *, urgent: bool = False) -> int:
    """Open a support case.

    Once, however often the call is retried.

    Args:
        customer_id: The customer's id,
            as the CRM spells it.
        summary (str): What went wrong, in one line.
        urgent: Page the on-call team.

    Returns:
        The case id.
    """
    return 1


def numpy(ctx: Context, customer_id: str, summary: str, urgent: bool = False) -> int:
    """Open a support case.

    Parameters
    ----------
    customer_id : str
        The customer's id,
        as the CRM spells it.
    summary : str
        What went wrong, in one line.
    urgent : bool, optional
        Page the on-call team.

    Returns
    -------
    int
        The case id.
    """
    return 1


def sphinx(ctx: Context, customer_id: str, summary: str, urgent: bool = False) -> int:
    """Open a support case.

    :param customer_id: The customer's id,
        as the CRM spells it.
    :param str summary: What went wrong, in one line.
    :type summary: str
    :param urgent: Page the on-call team.
    :returns: The case id.
    """
    return 1


@pytest.mark.parametrize("fn", [google, numpy, sphinx], ids=lambda f: f.__name__)
def test_a_docstrings_parameter_section_becomes_the_parameters_descriptions(fn: Any) -> None:
    """Google ``Args:``, NumPy ``Parameters`` and Sphinx ``:param:``: every adapter shows the
    model each parameter's own words (the schema is `app.registry.tool_schema`'s), and the section
    leaves the tool's description, which keeps the rest of the docstring."""
    schema = app_with(fn).registry.tool_schema(fn.__name__)
    properties = schema["parameters"]["properties"]
    assert properties["customer_id"]["description"] == "The customer's id, as the CRM spells it."
    assert properties["summary"]["description"] == "What went wrong, in one line."
    assert properties["urgent"]["description"] == "Page the on-call team."
    assert schema["description"].startswith("Open a support case.")
    assert "customer_id" not in schema["description"]
    assert "The case id." in schema["description"]


def test_a_docstring_without_a_parameter_section_is_kept_whole() -> None:
    def plain(ctx: Context, text: str) -> str:
        """Echo it.

        Args: are mentioned in passing, not a section."""
        return text

    schema = app_with(plain).registry.tool_schema("plain")
    assert schema["description"] == "Echo it.\n\nArgs: are mentioned in passing, not a section."
    assert "description" not in schema["parameters"]["properties"]["text"]


def test_a_typed_result_has_an_object_schema_and_its_structured_form() -> None:
    app = app_with(book)
    assert app.registry.output_schema("book") == app.tools["book"].contract.result_schema()
    assert app.registry.structured_result("book", {"city": "Oslo", "zip": 1}) == {
        "city": "Oslo",
        "zip": 1,
    }
    counted = app_with(google)
    assert counted.registry.output_schema("google") == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert counted.registry.structured_result("google", 7) == {"result": 7}

    def nested(ctx: Context) -> list[Window]:
        return []

    wrapped = app_with(nested).registry.output_schema("nested")
    assert wrapped is not None and "Window" in wrapped["$defs"]
    assert wrapped["properties"]["result"]["items"] == {"$ref": "#/$defs/Window"}

    def untyped(ctx: Context):  # type: ignore[no-untyped-def]
        return None

    loose = app_with(untyped)
    assert loose.registry.output_schema("untyped") is None
    assert loose.registry.structured_result("untyped", {"a": 1}) == {"a": 1}
    assert loose.registry.structured_result("untyped", 3) is None


def test_lax_arguments_convert_a_models_trivial_slips_and_the_rest_is_still_refused() -> None:
    app = app_with(google)
    assert app.registry.coerce_arguments(
        "google", {"customer_id": "c-7", "summary": "x", "urgent": "true"}
    ) == {"customer_id": "c-7", "summary": "x", "urgent": True}
    with pytest.raises(tenure.PayloadError) as strict:
        app.tools["google"].validate({"customer_id": "c-7", "summary": "x", "urgent": "true"})
    assert strict.value.problems
    with pytest.raises(tenure.PayloadError) as still:
        app.registry.coerce_arguments(
            "google", {"customer_id": 7, "summary": "x", "urgent": "maybe"}
        )
    assert len(still.value.problems) == 2, still.value.problems
