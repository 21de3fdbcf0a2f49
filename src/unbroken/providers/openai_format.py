"""OpenAI history rules (Chat Completions and Responses), as pure functions on plain dicts.

Chat Completions: the history is a list of messages; an assistant message with ``tool_calls``
must be followed by one ``role: "tool"`` message per call (errors are said in the content).
Responses: the history is a list of input items; each ``function_call`` item is answered by a
``function_call_output`` item with the same ``call_id``, later in the list.

Tool arguments arrive as a JSON *string* the model wrote; anything that is not a JSON object
becomes a ``ProposedCall`` with ``error`` set, which the runner answers without executing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..codec import ensure_json
from ..errors import NotJSONValue
from ..model import ProposedCall
from ..state import JSONValue, ToolCall, ToolResult
from ._client import int_field
from ._history import (
    HistoryFormat,
    assistant_messages,
    assistant_turn_starts,
    pick_calls,
    start_messages,
    unanswered_calls,
)

CHAT = "openai-chat"
RESPONSES = "openai-responses"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_arguments(arguments: object) -> tuple[dict[str, JSONValue], str | None]:
    """The arguments as a dict, or ``({}, why)`` when they are not a JSON object."""
    if not isinstance(arguments, str):
        return {}, f"the arguments are a {type(arguments).__name__}, not a JSON string"
    try:
        value = json.loads(arguments, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return {}, f"the arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return {}, f"the arguments are a JSON {type(value).__name__}, not an object"
    try:
        ensure_json(value, "arguments")
    except NotJSONValue as exc:
        return {}, str(exc)
    return value, None


def error_text(result: ToolResult) -> str:
    """Neither API has an error flag on tool results: a failure is said in the text."""
    if not result.is_error or result.content.startswith("Error"):
        return result.content
    return f"Error: {result.content}"


def _answers(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> Iterator[tuple[str, str]]:
    """(call id, result text) for each call, in order."""
    return ((call.id, error_text(result)) for call, result in zip(calls, results, strict=True))


def _tokens(usage: Mapping[str, Any], prompt: str, completion: str) -> int:
    """The reported total, else the sum of its two parts."""
    return int_field(usage, "total_tokens") or int_field(usage, prompt) + int_field(usage, completion)


# --------------------------------------------------------------------------- Chat Completions


def chat_tool_calls(message: Mapping[str, Any]) -> list[ProposedCall]:
    calls = []
    for item in message.get("tool_calls") or []:
        if not isinstance(item, Mapping):
            continue
        call_id = str(item.get("id", ""))
        function = item.get("function")
        if item.get("type", "function") == "function" and isinstance(function, Mapping):
            arguments, error = parse_arguments(function.get("arguments"))
            calls.append(ProposedCall(call_id, str(function.get("name", "")), arguments, error))
        else:
            kind = str(item.get("type"))
            detail = item.get(kind)
            name = str(detail.get("name", kind)) if isinstance(detail, Mapping) else kind
            calls.append(ProposedCall(call_id, name, {}, f"tool calls of type {kind!r} are not supported"))
    return calls


def chat_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    text = content if isinstance(content, str) else ""
    refusal = message.get("refusal")
    if not text and isinstance(refusal, str):
        return refusal
    return text


def chat_tokens(usage: Mapping[str, Any]) -> int:
    # cached_tokens are a part of prompt_tokens, so they are not added again
    return _tokens(usage, "prompt_tokens", "completion_tokens")


def chat_tool_result_messages(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
    return [{"role": "tool", "tool_call_id": call_id, "content": text} for call_id, text in _answers(calls, results)]


def chat_dangling_call_ids(messages: Sequence[JSONValue]) -> list[str]:
    """Ids of ``tool_calls`` not answered by the ``role: "tool"`` messages right after them."""
    return unanswered_calls(
        messages,
        calls_in=lambda message: [str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)],
        reply_role="tool",
        answers_in=lambda reply: [str(reply.get("tool_call_id"))],
    )


def chat_find_calls(messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
    return pick_calls((call for message in assistant_messages(messages) for call in chat_tool_calls(message)), call_ids)


def chat_turn_starts(messages: Sequence[JSONValue]) -> list[int]:
    """Indices of assistant messages that follow a user or tool message."""
    return assistant_turn_starts(messages, ("user", "tool"))


# --------------------------------------------------------------------------- Responses

_INPUT_ITEM_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
    }
)
_CALL_ITEM_TYPES = frozenset({"function_call", "custom_tool_call"})
_OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def is_output_item(item: JSONValue) -> bool:
    """True for items the model produced (reasoning, messages, calls, server-tool items)."""
    if not isinstance(item, Mapping):
        return False
    if item.get("type") in _INPUT_ITEM_TYPES:
        return False
    return item.get("role") not in ("user", "system", "developer")


def stateless(item: JSONValue) -> JSONValue | None:
    """An output item as it may be sent back with ``store=False``: without its server-side ``id``
    (the server kept nothing to look it up by). A reasoning item without ``encrypted_content`` is
    only such a reference, so it is left out (None)."""
    if not is_output_item(item) or not isinstance(item, Mapping):
        return item
    if item.get("type") == "reasoning" and not item.get("encrypted_content"):
        return None
    if "id" not in item:
        return item
    return {key: value for key, value in item.items() if key != "id"}


def responses_tool_calls(items: Sequence[JSONValue]) -> list[ProposedCall]:
    calls = []
    for item in items:
        if not isinstance(item, Mapping) or item.get("type") not in _CALL_ITEM_TYPES:
            continue
        call_id = str(item.get("call_id", ""))
        name = str(item.get("name", ""))
        if item.get("type") == "function_call":
            arguments, error = parse_arguments(item.get("arguments"))
            calls.append(ProposedCall(call_id, name, arguments, error))
        else:
            calls.append(ProposedCall(call_id, name, {}, "custom (free-form) tool calls are not supported"))
    return calls


def responses_text(items: Sequence[JSONValue]) -> str:
    parts = []
    for item in items:
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or []:
            if isinstance(part, Mapping) and part.get("type") == "output_text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, Mapping) and part.get("type") == "refusal":
                parts.append(str(part.get("refusal", "")))
    return "".join(parts)


def responses_tokens(usage: Mapping[str, Any]) -> int:
    # input_tokens already include the cached ones; output_tokens include reasoning tokens
    return _tokens(usage, "input_tokens", "output_tokens")


def responses_tool_result_messages(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
    return [
        {"type": "function_call_output", "call_id": call_id, "output": text}
        for call_id, text in _answers(calls, results)
    ]


def responses_dangling_call_ids(items: Sequence[JSONValue]) -> list[str]:
    """``call_id``s of call items with no matching output item after them."""
    open_calls: dict[str, str] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind in _CALL_ITEM_TYPES:
            open_calls[str(item.get("call_id"))] = _OUTPUT_OF[str(kind)]
        elif kind in _INPUT_ITEM_TYPES:
            call_id = str(item.get("call_id"))
            if open_calls.get(call_id) == kind:
                del open_calls[call_id]
    return list(open_calls)


def responses_find_calls(items: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
    return pick_calls(responses_tool_calls(items), call_ids)


def responses_turn_starts(items: Sequence[JSONValue]) -> list[int]:
    """Indices of the first item of each model answer that follows input items."""
    return [
        index for index in range(1, len(items)) if is_output_item(items[index]) and not is_output_item(items[index - 1])
    ]


CHAT_HISTORY = HistoryFormat(
    CHAT, start_messages, chat_tool_result_messages, chat_dangling_call_ids, chat_find_calls, chat_turn_starts
)
RESPONSES_HISTORY = HistoryFormat(
    RESPONSES,
    start_messages,
    responses_tool_result_messages,
    responses_dangling_call_ids,
    responses_find_calls,
    responses_turn_starts,
)
