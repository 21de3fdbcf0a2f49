"""What the providers' history formats share: the rules as one value, and the scans of a
history that every format does the same way (with its own field names).

A history is a list of plain dicts in the provider's shape; nothing here imports an SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._plain import Frozen
from ..model import ProposedCall
from ..state import JSONValue, ToolCall, ToolResult


class HistoryFormat(Frozen):
    """One provider's history rules: the history half of the ``Model`` protocol, as pure functions."""

    __slots__ = ("dangling_call_ids", "find_calls", "provider", "start_messages", "tool_result_messages", "turn_starts")
    provider: str
    start_messages: Callable[[str], list[JSONValue]]
    tool_result_messages: Callable[[Sequence[ToolCall], Sequence[ToolResult]], list[JSONValue]]
    dangling_call_ids: Callable[[Sequence[JSONValue]], list[str]]
    find_calls: Callable[[Sequence[JSONValue], Sequence[str]], list[ProposedCall]]
    turn_starts: Callable[[Sequence[JSONValue]], list[int]]

    def __init__(
        self,
        provider: str,
        start_messages: Callable[[str], list[JSONValue]],
        tool_result_messages: Callable[[Sequence[ToolCall], Sequence[ToolResult]], list[JSONValue]],
        dangling_call_ids: Callable[[Sequence[JSONValue]], list[str]],
        find_calls: Callable[[Sequence[JSONValue], Sequence[str]], list[ProposedCall]],
        turn_starts: Callable[[Sequence[JSONValue]], list[int]],
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "provider", provider)
        set_field(self, "start_messages", start_messages)
        set_field(self, "tool_result_messages", tool_result_messages)
        set_field(self, "dangling_call_ids", dangling_call_ids)
        set_field(self, "find_calls", find_calls)
        set_field(self, "turn_starts", turn_starts)


def start_messages(task: str) -> list[JSONValue]:
    """Every provider starts a run the same way: the task as the first user message."""
    return [{"role": "user", "content": task}]


def role_of(message: JSONValue) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def assistant_messages(messages: Iterable[JSONValue]) -> Iterator[Mapping[str, Any]]:
    return (message for message in messages if isinstance(message, Mapping) and message.get("role") == "assistant")


def pick_calls(calls: Iterable[ProposedCall], call_ids: Sequence[str]) -> list[ProposedCall]:
    """The calls with these ids, in ``call_ids`` order (the last call wins when an id repeats)."""
    found = {call.id: call for call in calls}
    return [found[call_id] for call_id in call_ids if call_id in found]


def unanswered_calls(
    messages: Sequence[JSONValue],
    *,
    calls_in: Callable[[Mapping[str, Any]], list[str]],
    reply_role: str,
    answers_in: Callable[[Mapping[str, Any]], Iterable[str]],
) -> list[str]:
    """Ids of the calls (``calls_in``) of each assistant message that the run of ``reply_role``
    messages right after it does not answer (``answers_in``)."""
    dangling: list[str] = []
    # `type(...) is dict` first: the isinstance check against the Mapping ABC is the slow part
    # of this scan, which runs over the whole history at the first model request of a resume.
    for index, message in enumerate(messages):
        if (type(message) is not dict and not isinstance(message, Mapping)) or message.get("role") != "assistant":
            continue
        wanted = calls_in(message)
        if not wanted:
            continue
        answered: set[str] = set()
        following = index + 1
        while following < len(messages):
            reply = messages[following]
            if (type(reply) is not dict and not isinstance(reply, Mapping)) or reply.get("role") != reply_role:
                break
            answered.update(answers_in(reply))
            following += 1
        dangling.extend(call_id for call_id in wanted if call_id not in answered)
    return dangling


def assistant_turn_starts(messages: Sequence[JSONValue], after_roles: tuple[str, ...]) -> list[int]:
    """Indices of assistant messages that follow a message of one of ``after_roles``."""
    return [
        index
        for index in range(1, len(messages))
        if role_of(messages[index]) == "assistant" and role_of(messages[index - 1]) in after_roles
    ]
