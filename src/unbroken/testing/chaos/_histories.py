"""Reading a run's messages: its tool calls and their results, in every provider's shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...state import JSONValue, RunState

UNKNOWN_PREFIX = "UNKNOWN OUTCOME"


@dataclass
class ToolTraffic:
    """The tool calls of a history and the results that answer them."""

    uses: list[str] = field(default_factory=list)
    """Call ids in the order the calls were made."""
    names: dict[str, str] = field(default_factory=dict)
    """The tool each call id asked for."""
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The results per call id (more than one is a broken history)."""

    def add_use(self, call_id: Any, name: Any) -> None:
        self.uses.append(str(call_id))
        self.names[str(call_id)] = str(name)

    def add_result(self, call_id: Any, result: Mapping[str, Any]) -> None:
        self.results.setdefault(str(call_id), []).append(dict(result))


def tool_traffic(messages: Sequence[JSONValue]) -> ToolTraffic:
    """The tool calls and results of ``messages``, in Anthropic, OpenAI Chat and Responses shapes."""
    traffic = ToolTraffic()
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        kind = message.get("type")
        if kind == "function_call":
            traffic.add_use(message.get("call_id"), message.get("name"))
        elif kind == "function_call_output":
            traffic.add_result(message.get("call_id"), message)
        elif message.get("role") == "tool":
            traffic.add_result(message.get("tool_call_id"), message)
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping):
                traffic.add_use(call.get("id"), (call.get("function") or {}).get("name"))
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    traffic.add_use(block.get("id"), block.get("name"))
                elif block.get("type") == "tool_result":
                    traffic.add_result(block.get("tool_use_id"), block)
    return traffic


def _result_text(result: Mapping[str, Any]) -> str:
    content = result.get("content", result.get("output", ""))
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def is_unknown(result: Mapping[str, Any]) -> bool:
    """Whether a tool result says the call's outcome is unknown (reconciliation could not tell)."""
    return _result_text(result).startswith(UNKNOWN_PREFIX)


def without_unknowns(message: Any, call_ids: set[str]) -> Any:
    """``message`` with the tool results of ``call_ids`` blanked (to compare the rest)."""
    if not isinstance(message, Mapping):
        return message
    if message.get("tool_call_id") in call_ids or message.get("call_id") in call_ids:
        return {"blank": True}
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blanked = [{"blank": True} if isinstance(b, Mapping) and b.get("tool_use_id") in call_ids else b for b in content]
    return {**message, "content": blanked}


def comparable(state: RunState) -> dict[str, Any]:
    """The state without its timestamp: two recoveries that did the same thing compare equal."""
    fields = state.small_fields()
    fields.pop("updated_at")
    return {"fields": fields, "messages": state.messages}
