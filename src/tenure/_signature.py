"""A tool's signature is its contract: arguments checked when a call is queued, the JSON
Schema a model sees, and results written through the return annotation.

Checked with pydantic, the library the agent ecosystem already speaks (pydantic-ai,
the MCP SDK and the OpenAI Agents SDK all describe tools with it), so the schema an
LLM is shown and the check a call must pass are one and the same.

Two validations, on purpose:

- at enqueue, *strict* validation of the payload's JSON: ``"3"`` is not an ``int``,
  an unknown argument is refused, and every problem is reported at once. What is
  stored is the validated JSON (only the arguments the caller set: a default that
  changes in a later deploy must not change what a repeated key means);
- in the worker, the stored JSON becomes the objects the annotations name (a
  dataclass, a pydantic model, a tuple). A tool whose arguments are all untyped
  skips this step entirely: a no-op job pays nothing for types it does not use.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ._docstring import split as split_docstring
from ._errors import PayloadError, PolicyError
from ._payload import MAX_PAYLOAD_BYTES, encode

MAX_PROBLEMS = 20  # listed in one PayloadError; the rest are counted

_ANY: Any = Any


def _is_any(annotation: Any) -> bool:
    return annotation is _ANY or annotation is inspect.Parameter.empty


@dataclass(frozen=True, slots=True)
class Contract:
    """The typed contract of one tool (see the module docstring)."""

    tool: str
    description: str
    arguments: type[BaseModel]
    names: tuple[str, ...]  # the parameters after the context, in order
    positional: int  # how many of them (leading) are positional-only
    keyword_only: frozenset[str]
    var_keyword: bool  # the tool takes **kwargs: unknown arguments are passed along
    plain: bool  # every argument untyped: the worker passes the JSON through as is
    result: TypeAdapter[Any] | None  # None: untyped result (any JSON)
    result_type: Any

    # -- enqueue -------------------------------------------------------------------

    def validate(
        self,
        payload: Any,
        what: str = "payload",
        limit: int = MAX_PAYLOAD_BYTES,
        *,
        lax: bool = False,
    ) -> str:
        """The canonical JSON of the validated payload, or PayloadError listing every
        problem. Pydantic models, dataclasses, dates and the like given by a Python
        caller are accepted in their JSON form. ``lax``: pydantic's lax mode, for a
        model's arguments (``"2"`` for an ``int``, ``"true"`` for a ``bool``); what is
        stored is the converted JSON, so the tool gets the type it declared."""
        if not isinstance(payload, Mapping):
            raise PayloadError(f"{what} for {self.tool!r} must be a JSON object (a dict)")
        try:
            jsonable = to_jsonable_python(payload)
        except UnicodeEncodeError as exc:
            raise PayloadError(
                f"{what} holds text that is not valid Unicode ({exc.reason})"
            ) from None
        except (PydanticSerializationError, ValueError, TypeError) as exc:
            first = str(exc).splitlines()[0]
            raise PayloadError(f"{what} for {self.tool!r} is not JSON: {first}") from None
        text = encode(jsonable, what, limit)
        try:
            checked = self.arguments.model_validate_json(text, strict=not lax)
        except pydantic.ValidationError as exc:
            raise _payload_error(self.tool, what, exc) from None
        stored = checked.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return encode(stored, what, limit)

    def problems(self, payload: Any) -> list[str]:
        """Every problem of ``payload`` as lines (empty: it fits), for a plan's report."""
        try:
            self.validate(payload, "arguments")
        except PayloadError as exc:
            return list(exc.problems) or [str(exc)]
        return []

    # -- the worker ----------------------------------------------------------------

    def call_arguments(self, payload: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments to call the tool with (after the context):
        the stored JSON as the objects its annotations name. PayloadError if the stored
        JSON no longer fits (the tool's signature changed after the call was queued)."""
        if self.plain and not self.positional:
            return (), dict(payload)
        try:
            checked = self.arguments.model_validate(payload)
        except pydantic.ValidationError as exc:
            raise _payload_error(self.tool, "stored payload", exc) from None
        values = [getattr(checked, f"a{n}") for n in range(len(self.names))]
        keywords = dict(zip(self.names[self.positional :], values[self.positional :], strict=True))
        if checked.model_extra:
            keywords.update(checked.model_extra)
        return tuple(values[: self.positional]), keywords

    def dump_result(self, value: Any) -> Any:
        """The result as JSON data, through the return annotation (a pydantic model, a
        dataclass, ...); ValueError-like errors for a value that does not fit it."""
        if self.result is None:
            return value
        if value is None and self.result_type in (None, type(None)):
            return None  # `-> None`: nothing to walk (pydantic would cost ~3 us per job)
        return self.result.dump_python(
            self.result.validate_python(value), mode="json", warnings="error"
        )

    # -- the model's view ----------------------------------------------------------

    def schema(self) -> dict[str, Any]:
        """Name, description and JSON Schema of the parameters, in the shape LLM function
        calling uses (OpenAI's ``function``, MCP's tool with ``inputSchema`` = parameters)."""
        return {
            "name": self.tool,
            "description": self.description,
            "parameters": self.arguments.model_json_schema(by_alias=True),
        }

    def result_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the result, or None when the tool's result is untyped."""
        return None if self.result is None else self.result.json_schema(mode="serialization")

    def output_schema(self) -> dict[str, Any] | None:
        """The result as a JSON object's schema (MCP's ``outputSchema``: an object at the
        root), or None when the result is untyped. A result that is not an object (an
        ``int``, a list, ``X | None``) is the object's one property ``result``."""
        schema = self.result_schema()
        if schema is None:
            return None
        if schema.get("type") == "object":
            return schema
        schema = dict(schema)
        defs = schema.pop("$defs", None)
        wrapped: dict[str, Any] = {
            "type": "object",
            "properties": {"result": schema},
            "required": ["result"],
        }
        if defs:
            wrapped["$defs"] = defs
        return wrapped

    def structured(self, value: Any) -> dict[str, Any] | None:
        """A succeeded result as the object `output_schema` describes (None: untyped and
        not an object, so there is nothing structured to give)."""
        schema = self.result_schema()
        if schema is None:
            return value if isinstance(value, dict) else None
        return value if schema.get("type") == "object" else {"result": value}


def _payload_error(tool: str, what: str, exc: pydantic.ValidationError) -> PayloadError:
    lines = []
    for error in exc.errors(include_url=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or "(payload)"
        given = error.get("input")
        shown = "" if error["type"] == "missing" else f" (got {_short(given)})"
        lines.append(f"{where}: {error['msg']}{shown}")
    count = len(lines)
    listed = lines[:MAX_PROBLEMS]
    if count > MAX_PROBLEMS:
        listed.append(f"... and {count - MAX_PROBLEMS} more")
    message = (
        f"{what} does not fit tool {tool!r} ({count} problem{'s' if count != 1 else ''}):\n  "
        + "\n  ".join(listed)
    )
    return PayloadError(message, problems=listed)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def build_contract(name: str, fn: Callable[..., Any]) -> Contract:
    """The contract of tool ``name``; PolicyError for a signature that cannot be one."""
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # a string annotation naming something undefined
        raise PolicyError(
            f"tool {name!r}: its annotations cannot be resolved ({type(exc).__name__}: {exc})"
        ) from None
    description, described = split_docstring(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    names: list[str] = []
    keyword_only: set[str] = set()
    positional = 0  # how many leading arguments are positional-only
    var_keyword = False
    plain = True
    for param in list(signature.parameters.values())[1:]:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise PolicyError(
                f"tool {name!r}: *{param.name} cannot be filled from a JSON object; "
                "name every argument"
            )
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
            if not _is_any(hints.get(param.name, _ANY)):
                plain = False
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional += 1
        annotation = hints.get(param.name, _ANY)
        if not _is_any(annotation):
            plain = False
        default = ... if param.default is inspect.Parameter.empty else param.default
        # Fields are named by position and aliased by the parameter's name, so that any
        # name a function may take (``json``, ``schema``, ``_private``) is an argument,
        # never a clash with pydantic's own attributes.
        fields[f"a{len(names)}"] = (
            annotation,
            pydantic.Field(default, alias=param.name, description=described.get(param.name)),
        )
        names.append(param.name)
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            keyword_only.add(param.name)
    config = ConfigDict(extra="allow" if var_keyword else "forbid", title=name)
    try:
        arguments = pydantic.create_model(
            f"{_identifier(name)}Arguments", __config__=config, **fields
        )
        arguments.model_json_schema()
    except (pydantic.PydanticUserError, pydantic.errors.PydanticSchemaGenerationError) as exc:
        first = str(exc).splitlines()[0]
        raise PolicyError(
            f"tool {name!r}: its arguments cannot be described as JSON: {first}"
        ) from None
    except TypeError as exc:
        raise PolicyError(f"tool {name!r}: its arguments cannot be checked: {exc}") from None
    result_type = hints.get("return", _ANY)
    return Contract(
        tool=name,
        description=description,
        arguments=arguments,
        names=tuple(names),
        positional=positional,
        keyword_only=frozenset(keyword_only),
        var_keyword=var_keyword,
        plain=plain,
        result=None if _is_any(result_type) else result_adapter(name, result_type),
        result_type=result_type,
    )


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in name)
    return cleaned[:1].upper() + cleaned[1:] if cleaned else "Tool"


def result_adapter(tool: str, annotation: Any) -> TypeAdapter[Any]:
    """A TypeAdapter for a return annotation, refused now when it cannot become JSON."""
    return json_adapter(f"tool {tool!r}: its return type", annotation)[0]


def json_adapter(what: str, annotation: Any) -> tuple[TypeAdapter[Any], dict[str, Any]]:
    """A TypeAdapter for ``annotation`` and its JSON Schema (serialized form); PolicyError
    saying ``what`` cannot become JSON when it cannot."""
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        schema = adapter.json_schema(mode="serialization")
    except (
        pydantic.PydanticUserError,
        pydantic.errors.PydanticSchemaGenerationError,
        pydantic.errors.PydanticInvalidForJsonSchema,
    ) as exc:
        first = str(exc).splitlines()[0]
        raise PolicyError(f"{what} {annotation!r} cannot become JSON ({first})") from None
    return adapter, schema


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def load_result(value: Any, result_type: Any) -> Any:
    """A stored JSON result as ``result_type`` (a pydantic model, a dataclass, ...)."""
    try:
        adapter = _ADAPTERS.get(result_type)
    except TypeError:  # an unhashable annotation
        adapter = None
    if adapter is None:
        adapter = TypeAdapter(result_type)
        try:
            _ADAPTERS[result_type] = adapter
        except TypeError:
            pass
    return adapter.validate_python(value)
