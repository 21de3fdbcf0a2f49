"""A run's messages, in the provider's own shape, turned into parts the inspector's page and
``unbroken show`` display (one reading of the three provider formats, used by both).

Each message becomes ``{"index", "role", "parts"}``; a part is one of ``text``, ``thinking``
(collapsed on the page), ``tool_call`` (name, id, arguments), ``tool_result`` (call id, content,
``is_error``) or ``other`` (anything unrecognised, shown as JSON: nothing is hidden). Nothing here
builds HTML: the page inserts every string as text, so a tool result cannot inject markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Part = dict[str, Any]

# What one part may send to the page (characters): a 50 MB tool result must not freeze the
# browser or the server. A longer part carries the first PART_CAP characters and ``more``
# (how many were left out); the page's "show all" streams it whole from ``/api/.../parts/N``.
PART_CAP = 64 * 1024


def _shown(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, indent=2, default=str)


def capped(part: Part, cap: int = PART_CAP) -> Part:
    """``part`` with its text (or a tool call's arguments, as JSON) cut to ``cap`` characters."""
    if part["kind"] == "tool_call" and not isinstance(part["arguments"], str):
        shown = _shown(part["arguments"])
        if len(shown) <= cap:
            return part
        return {**part, "arguments": shown[:cap], "more": len(shown) - cap}
    field = "arguments" if part["kind"] == "tool_call" else "text"
    text = part.get(field)
    if isinstance(text, str) and len(text) > cap:
        return {**part, field: text[:cap], "more": len(text) - cap}
    return part


def full_text(part: Part) -> str:
    """All of a part's text, as ``capped`` cut it (tool call arguments as indented JSON)."""
    if part["kind"] == "tool_call":
        arguments = part["arguments"]
        return arguments if isinstance(arguments, str) else _shown(arguments)
    return str(part.get("text", ""))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def _arguments(value: Any) -> Any:
    """OpenAI Chat sends arguments as a JSON string the model may have got wrong: parse if we can."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _anthropic_block(block: Any) -> Part:
    if not isinstance(block, Mapping):
        return {"kind": "text", "text": _text(block)}
    kind = block.get("type")
    if kind == "text":
        return {"kind": "text", "text": _text(block.get("text", ""))}
    if kind == "thinking":
        return {"kind": "thinking", "text": _text(block.get("thinking", ""))}
    if kind == "redacted_thinking":
        return {"kind": "thinking", "text": "(redacted by the provider)"}
    if kind == "tool_use":
        return {
            "kind": "tool_call",
            "id": str(block.get("id", "")),
            "name": str(block.get("name", "")),
            "arguments": block.get("input"),
        }
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                _text(item.get("text", item)) if isinstance(item, Mapping) else _text(item) for item in content
            )
        return {
            "kind": "tool_result",
            "id": str(block.get("tool_use_id", "")),
            "text": _text(content),
            "is_error": bool(block.get("is_error", False)),
        }
    return {"kind": "other", "text": _text(block)}


def _anthropic(message: Mapping[str, Any]) -> list[Part]:
    content = message.get("content")
    if isinstance(content, list):
        return [_anthropic_block(block) for block in content]
    return [{"kind": "text", "text": _text(content)}]


def _chat(message: Mapping[str, Any]) -> list[Part]:
    if message.get("role") == "tool":
        return [
            {
                "kind": "tool_result",
                "id": str(message.get("tool_call_id", "")),
                "text": _text(message.get("content", "")),
                "is_error": False,
            }
        ]
    parts: list[Part] = []
    if message.get("reasoning_content"):
        parts.append({"kind": "thinking", "text": _text(message["reasoning_content"])})
    content = message.get("content")
    if isinstance(content, list):
        parts += [
            {"kind": "text", "text": _text(item.get("text", item) if isinstance(item, Mapping) else item)}
            for item in content
        ]
    elif content:
        parts.append({"kind": "text", "text": _text(content)})
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(
            {
                "kind": "tool_call",
                "id": str(call.get("id", "")) if isinstance(call, Mapping) else "",
                "name": str(function.get("name", "")),
                "arguments": _arguments(function.get("arguments")),
            }
        )
    return parts


def _responses(item: Mapping[str, Any]) -> tuple[str, list[Part]]:
    kind = item.get("type", "message")
    if kind == "message" or "role" in item:
        content = item.get("content")
        if isinstance(content, list):
            texts = [_text(c.get("text", c) if isinstance(c, Mapping) else c) for c in content]
            return str(item.get("role", "assistant")), [{"kind": "text", "text": t} for t in texts]
        return str(item.get("role", "assistant")), [{"kind": "text", "text": _text(content)}]
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = "\n".join(_text(s.get("text", s)) if isinstance(s, Mapping) else _text(s) for s in summary)
        return "assistant", [{"kind": "thinking", "text": text or "(encrypted reasoning)"}]
    if str(kind).endswith("_call"):
        return "assistant", [
            {
                "kind": "tool_call",
                "id": str(item.get("call_id", "")),
                "name": str(item.get("name", kind)),
                "arguments": _arguments(item.get("arguments")),
            }
        ]
    if str(kind).endswith("_call_output"):
        return "tool", [
            {
                "kind": "tool_result",
                "id": str(item.get("call_id", "")),
                "text": _text(item.get("output", "")),
                "is_error": False,
            }
        ]
    return "other", [{"kind": "other", "text": _text(item)}]


def render_message(provider: str, index: int, message: Any, *, cap: int | None = PART_CAP) -> dict[str, Any]:
    """One stored message as ``{"index", "role", "parts"}`` (see the module docstring), each
    part cut to ``cap`` characters (None: whole)."""
    item = _render(provider, index, message)
    if cap is not None:
        item["parts"] = [capped(part, cap) for part in item["parts"]]
    return item


def _render(provider: str, index: int, message: Any) -> dict[str, Any]:
    if message is None:  # outside a loaded window: should not happen for a full decode
        return {"index": index, "role": "unknown", "parts": [{"kind": "other", "text": "(not loaded)"}]}
    if not isinstance(message, Mapping):
        return {"index": index, "role": "unknown", "parts": [{"kind": "other", "text": _text(message)}]}
    if provider == "openai-responses":
        role, parts = _responses(message)
        return {"index": index, "role": role, "parts": parts}
    role = str(message.get("role", "unknown"))
    parts = _chat(message) if provider == "openai-chat" else _anthropic(message)
    return {"index": index, "role": role, "parts": parts}
