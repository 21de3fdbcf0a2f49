"""Anthropic Messages history rules, as pure functions on plain dicts (no SDK import).

Shared by the scripted model and the Anthropic adapter: how a task becomes the first user
message, how tool calls are read from an assistant message, how results are answered (all
tool_result blocks in one user message, before any text, ``is_error`` for failures), and
which tool_use ids a history leaves unanswered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model import ProposedCall
from ..state import JSONValue, ToolCall, ToolResult

PROVIDER = "anthropic"
FINAL_STOP_REASONS = frozenset({"end_turn", "stop_sequence", "refusal", None})


def start_messages(task: str) -> list[JSONValue]:
    return [{"role": "user", "content": task}]


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


def tokens_of(usage: Mapping[str, Any]) -> int:
    total = 0
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def tool_result_messages(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[JSONValue]:
    blocks: list[JSONValue] = []
    for call, result in zip(calls, results, strict=True):
        block: dict[str, JSONValue] = {"type": "tool_result", "tool_use_id": call.id, "content": result.content}
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
    return [{"role": "user", "content": blocks}]


def dangling_call_ids(messages: Sequence[JSONValue]) -> list[str]:
    """tool_use ids not answered by a tool_result in the user turn right after their assistant
    message (consecutive user messages count as one turn: the API merges them)."""
    dangling: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        wanted = [str(b.get("id")) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]
        if not wanted:
            continue
        answered: set[str] = set()
        following = index + 1
        while following < len(messages):
            reply = messages[following]
            if not isinstance(reply, Mapping) or reply.get("role") != "user":
                break
            blocks = reply.get("content")
            if isinstance(blocks, list):
                answered.update(
                    str(b.get("tool_use_id"))
                    for b in blocks
                    if isinstance(b, Mapping) and b.get("type") == "tool_result"
                )
            following += 1
        dangling.extend(call_id for call_id in wanted if call_id not in answered)
    return dangling


def find_calls(messages: Sequence[JSONValue], call_ids: Sequence[str]) -> list[ProposedCall]:
    """The tool calls with these ids, read back from the assistant messages (in ``call_ids`` order)."""
    found: dict[str, ProposedCall] = {}
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                found.update((call.id, call) for call in tool_calls(content))
    return [found[call_id] for call_id in call_ids if call_id in found]


def turn_starts(messages: Sequence[JSONValue]) -> list[int]:
    """Indices where an assistant turn begins after a user turn: the only places a history may be
    cut without separating a tool_use from its tool_result."""
    starts = []
    for index in range(1, len(messages)):
        here, before = messages[index], messages[index - 1]
        if (
            isinstance(here, Mapping)
            and here.get("role") == "assistant"
            and isinstance(before, Mapping)
            and before.get("role") == "user"
        ):
            starts.append(index)
    return starts
