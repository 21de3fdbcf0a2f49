"""The child process of the compacted-run crash tests: a long run with compaction on, in a fresh
interpreter so SIGKILL loses everything not yet durable.

    python compacted_driver.py --store URL --run-id ID --service PATH --turns N
        [--first-span K] [--kill-in-snapshot N]

Each turn the model asks to send email number i (call id ``c<i>``), i read from the newest tool
result it is sent, so it answers the same after a compaction and after a resume in a new process.
The email tool is a side effect with a probe (its outbox is searchable by idempotency key).
``--first-span K`` makes ``window.load_window`` start from the last K records (so a short run
takes the tail path a long one takes with the default). ``--kill-in-snapshot N`` SIGKILLs the
process inside the store's write of the N-th snapshot record it writes (before its commit).
Crash points are armed by the parent through ``UNBROKEN_CRASH_AT``. On a normal exit the driver
prints one JSON line: status, resumed, and ``message_base`` (messages loaded as None: >0 means
the resume read only the run's tail).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crash_service import CountingService

from unbroken import Agent, Found, NotExecuted, ScriptedModel, ToolCall, crashpoints, open_store, tool, window
from unbroken.compaction import Compactor
from unbroken.model import ModelTurn, ToolSpec
from unbroken.state import JSONValue
from unbroken.stores.base import Store

# The crash point each store reaches inside a record write, before it is durable.
INSIDE_WRITE = {"sqlite.before_commit", "file.before_rename", "postgres.before_append"}


def script(turns: int) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = [
        {
            "content": [{"type": "tool_use", "id": f"c{i}", "name": "send_email", "input": {"n": i}}],
            "stop_reason": "tool_use",
            "usage": {},
        }
        for i in range(turns)
    ]
    return [*answers, {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}]


def _tool_use_ids(messages: Sequence[JSONValue]) -> Iterator[str]:
    for message in reversed(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in reversed(content) if isinstance(content, list) else ():
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                yield str(block["tool_use_id"])


class Counter(ScriptedModel):
    """Answers ``c<i+1>`` after the result of ``c<i>``: reads the request, not its length."""

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        last = next(_tool_use_ids(messages), None)
        answered = int(last[1:]) + 1 if last is not None else 0
        return super().complete([{"role": "assistant"}] * answered, tools, system)


def compactor() -> Compactor:
    return Compactor(
        threshold_tokens=1_500, keep_recent_tokens=700, summarise=lambda previous, messages: f"{len(messages)}"
    )


def build_agent(store: Store, service: CountingService, turns: int) -> Agent:
    def find_in_outbox(call: ToolCall) -> Found | NotExecuted:
        sent = service.find_sent(call.idempotency_key)
        return Found(sent) if sent is not None else NotExecuted()

    @tool(effect="side_effect", probe=find_in_outbox)
    def send_email(n: int, *, call: ToolCall) -> str:
        """Send email number n."""
        return service.send(call.idempotency_key, f"user{n}@example.com", "update") + " " + "x" * 300

    return Agent(
        Counter(script(turns)), [send_email], store, max_turns=turns + 1, snapshot_every=5, compaction=compactor()
    )


def kill_inside_snapshot_write(store: Store, nth: int) -> None:
    """SIGKILL at the store's inside-write crash point of the ``nth`` snapshot record written."""
    writing = {"snapshot": False, "count": 0}
    real = store.backend.write_record

    def write_record(save: Any, entries: Any, *, expect_seq: int, fence: int | None) -> None:
        writing["snapshot"] = bool(save.snapshot)
        writing["count"] += writing["snapshot"]
        try:
            real(save, entries, expect_seq=expect_seq, fence=fence)
        finally:
            writing["snapshot"] = False

    def observe(label: str) -> None:
        if writing["snapshot"] and writing["count"] == nth and label in INSIDE_WRITE:
            os.kill(os.getpid(), signal.SIGKILL)

    store.backend.write_record = write_record  # type: ignore[method-assign]
    crashpoints.observe(observe)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--first-span", type=int, default=0)
    parser.add_argument("--kill-in-snapshot", type=int, default=0)
    args = parser.parse_args(argv)
    if args.first_span:
        window.FIRST_SPAN = args.first_span
    store = open_store(args.store)
    if args.kill_in_snapshot:
        kill_inside_snapshot_write(store, args.kill_in_snapshot)
    agent = build_agent(store, CountingService(args.service), args.turns)
    result = agent.run("Send every update", run_id=args.run_id)
    messages = result.state.messages if result.state is not None else []
    base = next((index for index, message in enumerate(messages) if message is not None), len(messages))
    print(json.dumps({"status": result.status, "resumed": result.resumed, "message_base": base}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
