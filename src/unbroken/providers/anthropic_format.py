"""Anthropic Messages history rules, as pure functions on plain dicts (no SDK import).

Shared by the scripted model and the Anthropic adapter: how a task becomes the first user
message, how tool calls are read from an assistant message, how results are answered (all
tool_result blocks in one user message, before any text, ``is_error`` for failures), and
which tool_use ids a history leaves unanswered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model import ModelTurn, ProposedCall
from ..state import JSONValue, ToolCall, ToolResult
from ..usage import token_count
from ._history import (
    HistoryFormat,
    assistant_messages,
    assistant_turn_starts,
    pick_calls,
    start_messages,
    unanswered_calls,
)

PROVIDER = "anthropic"
FINAL_STOP_REASONS = frozenset({"end_turn", "stop_sequence", "refusal", None})


def tool_calls(content: Sequence[Any]) -> list[ProposedCall]:
    calls = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            continue
        call_id = str(block.get("id", ""))
        name = str(block.get("name", ""))
        arguments = block.get("input")
        if isinstance(arguments, Mapping):
            calls.append(ProposedCall(call_id, name, dict(arguments)))
        else:
            calls.append(
                ProposedCall(call_id, name, {}, error=f"the tool input is a {type(arguments).__name__}, not an object")
            )
    return calls


def text_of(content: Sequence[Any]) -> str:
    return "".join(
        str(block.get("text", "")) for block in content if isinstance(block, Mapping) and block.get("type") == "text"
    )


def tokens_of(usage: object) -> int:
    """The tokens an answer's ``usage`` counts (each part a valid count, ``usage.token_count``)."""
    if not isinstance(usage, Mapping):
        return 0
    total = 0
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        total += token_count(usage.get(key)) or 0  # (a value that is no count is dropped: usage.py)
    return total


def assistant_turn(
    content: list[Any],
    calls: list[ProposedCall],
    usage: Any,
    *,
    stop_reason: str | None,
    text: str,
    done: bool,
) -> ModelTurn:
    """The turn an answer's ``content`` makes: kept whole as one assistant message."""
    return ModelTurn(
        messages=[{"role": "assistant", "content": content}],
        tool_calls=calls,
        usage=usage,
        tokens=tokens_of(usage),
        stop_reason=stop_reason,
        text=text,
        done=done,
    )


def tool_result_messages(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
    blocks: list[JSONValue] = []
    for call, result in zip(calls, results, strict=True):
        block: dict[str, JSONValue] = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
    return [{"role": "user", "content": blocks}]


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        str(b.get("id"))
        for b in content
        if (type(b) is dict or isinstance(b, Mapping)) and b.get("type") == "tool_use"  # dict: no ABC check
    ]


def _tool_result_ids(reply: Mapping[str, Any]) -> list[str]:
    blocks = reply.get("content")
    if not isinstance(blocks, list):
        return []
    return [
        str(b.get("tool_use_id"))
        for b in blocks
        if (type(b) is dict or isinstance(b, Mapping)) and b.get("type") == "tool_result"
    ]


def dangling_call_ids(messages: Sequence[JSONValue]) -> list[str]:
    """tool_use ids not answered by a tool_result in the user turn right after their assistant
    message (consecutive user messages count as one turn: the API merges them)."""
    return unanswered_calls(messages, calls_in=_tool_use_ids, reply_role="user", answers_in=_tool_result_ids)


def find_calls(messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
    """The tool calls with these ids, read back from the assistant messages (in ``call_ids`` order)."""
    contents = (message.get("content") for message in assistant_messages(messages))
    return pick_calls(
        (call for content in contents if isinstance(content, list) for call in tool_calls(content)), call_ids
    )


def turn_starts(messages: Sequence[JSONValue]) -> list[int]:
    """Indices where an assistant turn begins after a user turn: the only places a history may be
    cut without separating a tool_use from its tool_result."""
    return assistant_turn_starts(messages, ("user",))


HISTORY = HistoryFormat(PROVIDER, start_messages, tool_result_messages, dangling_call_ids, find_calls, turn_starts)

__all__ = [
    "FINAL_STOP_REASONS",
    "HISTORY",
    "PROVIDER",
    "assistant_turn",
    "dangling_call_ids",
    "find_calls",
    "start_messages",
    "text_of",
    "tokens_of",
    "tool_calls",
    "tool_result_messages",
    "turn_starts",
]
