"""``@tool``: a Python function the model may call, with its effect class.

* ``read_only``: reads only; re-run freely on resume.
* ``idempotent``: running it twice with the same idempotency key has the effect of once;
  re-run on resume with the same key (``call.idempotency_key``).
* ``side_effect`` (the default for anything undeclared): runs at most once; on resume the
  effect ledger and the optional ``probe`` decide, and an unknowable outcome is reported.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from ._plain import Frozen
from .errors import ToolDefinitionError
from .model import ToolSpec
from .state import EFFECTS, Effect, JSONValue, ToolCall


class Found(Frozen):
    """Probe answer: the call did take effect; ``result`` is what the tool would have returned."""

    __slots__ = ("result",)
    result: JSONValue

    def __init__(self, result: JSONValue) -> None:
        object.__setattr__(self, "result", result)


class NotExecuted(Frozen):
    """Probe answer: the call certainly did not take effect; it is safe to run it now."""

    __slots__ = ()


class Unknown(Frozen):
    """Probe answer: cannot tell whether the call took effect."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str = "") -> None:
        object.__setattr__(self, "reason", reason)


ProbeAnswer = Found | NotExecuted | Unknown
Probe = Callable[[ToolCall], ProbeAnswer | Awaitable[ProbeAnswer]]
"""A probe may be ``async def``: both ``run`` and ``arun`` await it."""


class Tool(Frozen):
    """A callable the model can use. Build one with ``@tool``."""

    __slots__ = (
        "approval",
        "approval_ttl",
        "description",
        "effect",
        "fn",
        "input_schema",
        "is_async",
        "name",
        "probe",
        "takes_call",
        "takes_state",
        "timeout",
    )
    name: str
    description: str
    effect: Effect
    fn: Callable[..., Any]
    input_schema: dict[str, JSONValue]
    probe: Probe | None
    takes_call: bool
    takes_state: bool
    is_async: bool
    timeout: float | None
    """Seconds the tool may run. Past it the engine stops waiting: a side effect's outcome is
    then unknown (it may still act), another call's result is an error."""
    approval: bool | Callable[[ToolCall], bool]
    """Ask a person before each call runs (True), or per call (a function of the call saying
    whether this one needs approval). See ``approvals.py``."""
    approval_ttl: float | None
    """Seconds an approval request (and the approval given to it) stays valid; None: forever."""

    def __init__(
        self,
        name: str,
        description: str,
        effect: Effect,
        fn: Callable[..., Any],
        input_schema: dict[str, JSONValue],
        probe: Probe | None = None,
        takes_call: bool = False,
        takes_state: bool = False,
        is_async: bool = False,
        timeout: float | None = None,
        approval: bool | Callable[[ToolCall], bool] = False,
        approval_ttl: float | None = None,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "name", name)
        set_field(self, "description", description)
        set_field(self, "effect", effect)
        set_field(self, "fn", fn)
        set_field(self, "input_schema", input_schema)
        set_field(self, "probe", probe)
        set_field(self, "takes_call", takes_call)
        set_field(self, "takes_state", takes_state)
        set_field(self, "is_async", is_async)
        set_field(self, "timeout", timeout)
        set_field(self, "approval", approval)
        set_field(self, "approval_ttl", approval_ttl)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)

    def arguments(self, call: ToolCall, business_state: dict[str, JSONValue]) -> dict[str, Any]:
        kwargs = dict(call.input)
        if self.takes_call:
            kwargs["call"] = call
        if self.takes_state:
            kwargs["state"] = business_state
        return kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(annotation: Any, where: str) -> dict[str, JSONValue]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is type(None):
        return {"type": "null"}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [_schema_for(arg, where) for arg in args]
        return {"anyOf": options}
    if annotation is list or origin is list:
        return {"type": "array", "items": _schema_for(args[0], where)} if args else {"type": "array"}
    if annotation is dict or origin is dict:
        return {"type": "object"}
    if origin is typing.Annotated:
        schema = _schema_for(args[0], where)
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    raise ToolDefinitionError(
        f"{where}: cannot describe type {annotation!r} to a model; use str, int, float, bool, "
        "list[...], dict, Literal[...] or Optional[...]"
    )


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effect: str,
    probe: Probe | None,
    timeout: float | None = None,
    approval: bool | Callable[[ToolCall], bool] = False,
    approval_ttl: float | None = None,
) -> Tool:
    if timeout is not None and not timeout > 0:
        raise ToolDefinitionError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if not (isinstance(approval, bool) or callable(approval)):
        raise ToolDefinitionError(f"approval must be True, False or a function of the call, not {approval!r}")
    if approval_ttl is not None and not approval_ttl > 0:
        raise ToolDefinitionError(f"approval_ttl must be a positive number of seconds, not {approval_ttl!r}")
    if effect not in EFFECTS:
        raise ToolDefinitionError(f"effect must be one of {', '.join(EFFECTS)}, not {effect!r}")
    tool_name = name or fn.__name__
    if not tool_name.replace("_", "a").replace("-", "a").isalnum() or len(tool_name) > 64:
        raise ToolDefinitionError(f"tool name {tool_name!r} must be 1-64 characters of a-z A-Z 0-9 _ -")
    if probe is not None and effect != "side_effect":
        raise ToolDefinitionError(f"tool {tool_name!r}: a probe only makes sense for effect='side_effect'")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read its type hints ({exc})") from exc
    properties: dict[str, JSONValue] = {}
    required: list[str] = []
    takes_call = takes_state = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "call" and param.kind == inspect.Parameter.KEYWORD_ONLY:
            takes_call = True
            continue
        if param.name == "state" and param.kind == inspect.Parameter.KEYWORD_ONLY:
            takes_state = True
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name!r}: *args/**kwargs cannot be described to a model")
        if hints.get(param.name) is ToolCall:  # given by the engine, not the model: keyword-only `call`
            raise ToolDefinitionError(
                f"tool {tool_name!r}: make {param.name!r} keyword-only and name it call "
                f"(def {fn.__name__}(..., *, call: ToolCall)); the engine passes it, the model does not"
            )
        properties[param.name] = _schema_for(hints.get(param.name, param.annotation), f"{tool_name}.{param.name}")
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    schema: dict[str, JSONValue] = {"type": "object", "properties": properties, "required": required}
    doc = inspect.getdoc(fn) or ""
    return Tool(
        name=tool_name,
        description=description or doc.strip() or tool_name,
        effect=effect,  # type: ignore[arg-type]
        fn=fn,
        input_schema=schema,
        probe=probe,
        takes_call=takes_call,
        takes_state=takes_state,
        is_async=inspect.iscoroutinefunction(fn),
        timeout=timeout,
        approval=approval,
        approval_ttl=approval_ttl,
    )


@typing.overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    effect: Effect = "side_effect",
    name: str | None = None,
    description: str | None = None,
    probe: Probe | None = None,
    timeout: float | None = None,
    approval: bool | Callable[[ToolCall], bool] = False,
    approval_ttl: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    effect: Effect = "side_effect",
    name: str | None = None,
    description: str | None = None,
    probe: Probe | None = None,
    timeout: float | None = None,
    approval: bool | Callable[[ToolCall], bool] = False,
    approval_ttl: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool. The JSON schema comes from the type hints, the description from the
    docstring. A keyword-only ``call: ToolCall`` parameter receives the call (with its
    ``idempotency_key``); a keyword-only ``state`` parameter receives the run's business_state.
    Undeclared effect means ``side_effect``: never re-run blindly. ``timeout`` (seconds) bounds
    how long the run waits for the tool; a side effect past it has an unknown outcome.
    ``approval`` (True, or a function of the call) makes the run stop, saved, with status
    ``awaiting_approval`` before the call runs, until a person approves or denies it
    (``unbroken approve`` / ``unbroken deny``); ``approval_ttl`` (seconds) bounds how long
    a request and its approval stay valid."""
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "effect": effect,
        "probe": probe,
        "timeout": timeout,
        "approval": approval,
        "approval_ttl": approval_ttl,
    }
    if fn is not None:
        return _build(fn, **options)

    def decorate(inner: Callable[..., Any]) -> Tool:
        return _build(inner, **options)

    return decorate


def effect_from_mcp(annotations: Mapping[str, Any] | None) -> Effect:
    """Map MCP tool annotations onto an effect class: ``readOnlyHint`` -> read_only,
    ``idempotentHint`` -> idempotent, anything else -> side_effect."""
    annotations = annotations or {}
    if annotations.get("readOnlyHint") is True:
        return "read_only"
    if annotations.get("idempotentHint") is True:
        return "idempotent"
    return "side_effect"


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """Accept a ``Tool`` or a plain function (treated as a side-effecting tool)."""
    if isinstance(value, Tool):
        return value
    if callable(value):
        return _build(value, name=None, description=None, effect="side_effect", probe=None)
    raise ToolDefinitionError(f"{value!r} is not a tool or a function")
