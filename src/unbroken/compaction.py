"""Compaction for long runs: what is *sent* shrinks, what is *kept* never does.

Three layers:

1. the full history (``state.messages``): every message ever exchanged, kept for audit and for
   ``unbroken history``; compaction never deletes or rewrites a message;
2. a summary (``state.summary``) of ``state.messages[:state.summary_upto]``;
3. the recent window ``state.messages[state.summary_upto:]``, sent as it is.

The model is sent the task and the summary as one user message, then the recent window. The
window always begins where a model turn begins and after every call before it has its result,
so a tool call is never separated from its result. Compaction runs before a model call when
the estimated size of what would be sent passes ``threshold_tokens``; the runner saves the
new summary as a save point labelled ``compacted`` (a crash before it only repeats the summary).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .model import HistoryReader, Model, add_usage
from .state import JSONValue, RunState

Summariser = Callable[[str | None, Sequence[JSONValue]], str | Awaitable[str]]
"""``summarise(previous_summary, messages) -> new summary``: fold ``messages`` into the summary."""

SUMMARY_SYSTEM = (
    "You compress the working memory of an autonomous agent. Write a faithful summary that lets the agent "
    "continue its task without the original messages: decisions made, facts learned, tool calls made and what "
    "they returned (ids, numbers, names exactly), what is done and what remains. No preamble."
)


def estimate_tokens(message: JSONValue) -> int:
    """A rough token count for one message: its JSON length / 4 (no tokenizer needed)."""
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":"))) // 4 + 1


def summary_message_text(task: str, summary: str) -> str:
    """The text of the user message that stands in for the summarised part of the history."""
    return (
        f"{task}\n\n<summary_of_earlier_work>\n{summary}\n</summary_of_earlier_work>\n"
        "The earlier messages were summarised above; the most recent ones follow."
    )


class Compactor:
    """Keep what is sent to the model under ``threshold_tokens`` (estimated by ``estimate``).

    When it is passed, the oldest turns are folded into the summary, keeping a recent window of
    about ``keep_recent_tokens`` (at least the latest turn). ``summarise`` is pluggable; by
    default a model call (``summary_model``, else the agent's model) writes the summary.
    Give it to ``Agent(compaction=Compactor(...))``."""

    def __init__(
        self,
        *,
        threshold_tokens: int = 100_000,
        keep_recent_tokens: int = 20_000,
        summarise: Summariser | None = None,
        summary_model: Model | None = None,
        estimate: Callable[[JSONValue], int] = estimate_tokens,
    ) -> None:
        if keep_recent_tokens >= threshold_tokens:
            from .errors import ConfigError

            raise ConfigError("keep_recent_tokens must be smaller than threshold_tokens")
        self.threshold_tokens = threshold_tokens
        self.keep_recent_tokens = keep_recent_tokens
        self.summarise = summarise
        self.summary_model = summary_model
        self.estimate = estimate

    # ------------------------------------------------------------------ what is sent

    def context(self, state: RunState, model: Model) -> list[JSONValue]:
        """What the model is sent: the full history, or the summary message and the recent window."""
        if state.summary is None:
            return list(state.messages)
        head = model.start_messages(summary_message_text(state.task, str(state.summary)))
        return [*head, *state.messages[state.summary_upto :]]

    def context_tokens(self, state: RunState, model: Model) -> int:
        return sum(self.estimate(message) for message in self.context(state, model))

    # ------------------------------------------------------------------ deciding the cut

    def cut(self, state: RunState, model: Model) -> int | None:
        """The new ``summary_upto`` (a turn start with every earlier call answered), or None."""
        messages = state.messages
        if not isinstance(model, HistoryReader):
            return None
        turn_starts = model.turn_starts
        # Only the window is looked at (the cost of a turn must not grow with the run's length,
        # and after a windowed resume the older messages are not even in memory): everything
        # before ``summary_upto`` was checked when it was cut, and holds no unanswered call.
        base = state.summary_upto
        window = messages[base:]
        candidates: list[int] = [base + index for index in turn_starts(window) if index > 0]
        if not candidates:
            return None
        sizes = [self.estimate(message) for message in window]
        suffix = [0] * (len(sizes) + 1)
        for offset in range(len(sizes) - 1, -1, -1):
            suffix[offset] = suffix[offset + 1] + sizes[offset]
        fitting = [i for i in candidates if suffix[i - state.summary_upto] <= self.keep_recent_tokens]
        # Prefer the biggest window that fits; else keep only the latest turn.
        ordered = fitting + [i for i in reversed(candidates) if i not in fitting]
        for index in ordered:
            if not model.dangling_call_ids(messages[base:index]):
                return index
        return None

    def due(self, state: RunState, model: Model) -> int | None:
        if state.pending_calls or self.context_tokens(state, model) <= self.threshold_tokens:
            return None
        return self.cut(state, model)

    # ------------------------------------------------------------------ compacting

    def compact(self, state: RunState, model: Model) -> bool:
        """Fold old turns into ``state.summary`` if the context is too big. Returns True when the
        state changed (the caller saves it); nothing is durable until then."""
        upto = self.due(state, model)
        if upto is None:
            return False
        previous, folded = self._fold_input(state, upto)
        if self.summarise is not None:
            summary = self.summarise(previous, folded)
            if inspect.iscoroutine(summary):
                summary.close()
                raise TypeError("an async summarise function needs Agent.arun")
        else:
            summary = self._default_summary(state, model, previous, folded)
        self._apply(state, str(summary), upto)
        return True

    async def acompact(self, state: RunState, model: Model) -> bool:
        """Async twin of ``compact`` (the summariser may be async)."""
        upto = self.due(state, model)
        if upto is None:
            return False
        previous, folded = self._fold_input(state, upto)
        if self.summarise is not None:
            summary: Any = self.summarise(previous, folded)
            if inspect.isawaitable(summary):
                summary = await summary
        else:
            summariser = self.summary_model or model
            turn = await summariser.acomplete(*self._summary_request(summariser, state, previous, folded))
            self._count(state, turn.tokens, turn.usage)
            summary = turn.text or ""
        self._apply(state, str(summary), upto)
        return True

    def _fold_input(self, state: RunState, upto: int) -> tuple[str | None, list[JSONValue]]:
        previous = None if state.summary is None else str(state.summary)
        return previous, list(state.messages[state.summary_upto : upto])

    def _summary_request(
        self, summariser: Model, state: RunState, previous: str | None, folded: Sequence[JSONValue]
    ) -> tuple[list[JSONValue], list[Any], str]:
        lines = [f"The agent's task: {state.task}"]
        if previous is not None:
            lines.append(f"Summary so far:\n{previous}")
        lines.append("Messages to fold into the summary (JSON, oldest first):")
        lines.extend(json.dumps(message, ensure_ascii=False) for message in folded)
        lines.append("Write the updated summary now.")
        return summariser.start_messages("\n\n".join(lines)), [], SUMMARY_SYSTEM

    def _default_summary(self, state: RunState, model: Model, previous: str | None, folded: Sequence[JSONValue]) -> str:
        summariser = self.summary_model or model
        turn = summariser.complete(*self._summary_request(summariser, state, previous, folded))
        self._count(state, turn.tokens, turn.usage)
        return turn.text or ""

    @staticmethod
    def _count(state: RunState, tokens: int, usage: dict[str, JSONValue]) -> None:
        state.tokens_used += int(tokens)
        state.usage = add_usage(state.usage, usage)

    @staticmethod
    def _apply(state: RunState, summary: str, upto: int) -> None:
        state.summary = summary
        state.summary_upto = upto
