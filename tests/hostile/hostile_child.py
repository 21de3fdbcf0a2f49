"""The child process of the hostile tests: one agent run in a fresh interpreter, so a SIGKILL
or SIGSTOP hits a real process. Every tool execution is appended (and fsynced) to
``<world>/journal.jsonl`` before the tool returns, so the parent counts executions across
every process that ever worked on the run.

    python hostile_child.py SCRIPT --store URL --run-id ID --world DIR [--driver sync|async]
        [--max-result-bytes N|none] [--big-mb N] [--probe [journal|async-raise]] [--approval]

Crash points are armed through ``UNBROKEN_CRASH_AT``. On a normal exit the child prints one
JSON line: the run's status, or the type and message of the error it ended with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from unbroken import (
    Agent,
    Found,
    LeaseLost,
    NotExecuted,
    ScriptedModel,
    Tool,
    ToolCall,
    UnbrokenError,
    current_lease,
    open_store,
    tool,
)
from unbroken.leases import make_owner


def turn(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "on it"}]
    blocks += [{"type": "tool_use", "id": call_id, "name": name, "input": args} for call_id, name, args in calls]
    return {"content": blocks, "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}}


FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 10}}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # Three turns, one email each, then done.
    "three_sends": [
        turn(("toolu_1", "send_email", {"to": "a@example.com"})),
        turn(("toolu_2", "send_email", {"to": "b@example.com"})),
        turn(("toolu_3", "send_email", {"to": "c@example.com"})),
        FINAL,
    ],
    # An email, a read, another email.
    "send_read_send": [
        turn(("toolu_send", "send_email", {"to": "r@example.com"})),
        turn(("toolu_read", "read_file", {"path": "a.txt"})),
        turn(("toolu_send2", "send_email", {"to": "s@example.com"})),
        FINAL,
    ],
    # A provider that duplicates an id inside one turn, with different arguments.
    "dup_ids": [
        turn(("call_0", "send_email", {"to": "x@example.com"}), ("call_0", "send_email", {"to": "y@example.com"})),
        FINAL,
    ],
    # One read-only call, killed by the parent before it ever starts.
    "one_read": [turn(("toolu_read", "read_file", {"path": "a.txt"})), FINAL],
    # One tool result of --big-mb megabytes.
    "big": [turn(("toolu_big", "big_result", {})), FINAL],
    # Two calls in one turn: a fenced send that may refuse, and a slow plain send.
    "fenced_pair": [
        turn(
            ("toolu_fenced", "send_fenced", {"to": "f@example.com"}),
            ("toolu_slow", "send_email", {"to": "s@example.com"}),
        ),
        FINAL,
    ],
    # A side effect whose own service refuses the run's fence while <world>/refuse exists.
    "fenced": [turn(("toolu_fenced", "send_fenced", {"to": "f@example.com"})), FINAL],
    # A tool declared idempotent that ignores its key (it sends every time it runs).
    "liar": [turn(("toolu_inv", "put_invoice", {"customer": "acme"})), FINAL],
}


def journal(world: Path, tool_name: str, call: ToolCall, **extra: Any) -> None:
    line = json.dumps({"tool": tool_name, "key": call.idempotency_key, "id": call.id, "pid": os.getpid(), **extra})
    fd = os.open(world / "journal.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def sent_to(world: Path) -> dict[str, str]:
    """Idempotency key -> address of every email the journal says was sent."""
    path = world / "journal.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {line["key"]: line.get("to", "") for line in lines}


def build_tools(world: Path, probe: str, big_mb: int, approval: bool) -> list[Tool]:
    async def raising_probe(call: ToolCall) -> Found | NotExecuted:
        raise RuntimeError("the outbox service is down")

    def in_journal(call: ToolCall) -> Found | NotExecuted:
        sent = sent_to(world).get(call.idempotency_key)
        return Found(f"sent to {sent}") if sent is not None else NotExecuted()

    def huge_probe(call: ToolCall) -> Found | NotExecuted:
        return Found("x" * (big_mb * 1024 * 1024)) if call.idempotency_key in sent_to(world) else NotExecuted()

    probes = {"none": None, "journal": in_journal, "async-raise": raising_probe, "huge": huge_probe}

    @tool(effect="side_effect", probe=probes[probe], approval=approval)
    def send_email(to: str, *, call: ToolCall) -> str:
        """Send an email (slowly, so concurrent callers overlap)."""
        (world / f"sending-{to}").touch()
        time.sleep(float(os.environ.get("HOSTILE_SEND_SECONDS", "0.2")))
        journal(world, "send_email", call, to=to)
        return f"sent to {to}"

    @tool(effect="read_only")
    def read_file(path: str, *, call: ToolCall) -> str:
        """Read a file (while <world>/pause exists: say so in <world>/paused and wait)."""
        if (world / "pause").exists():
            (world / "paused").write_text(str(os.getpid()))
            while (world / "pause").exists():
                time.sleep(0.02)
        journal(world, "read_file", call)
        return f"contents of {path}"

    @tool(effect="read_only")
    def big_result(*, call: ToolCall) -> str:
        """Return a very big text."""
        journal(world, "big_result", call)
        return "x" * (big_mb * 1024 * 1024)

    @tool(effect="idempotent")
    def put_invoice(customer: str, *, call: ToolCall) -> str:
        """Send an invoice (claims to be idempotent, ignores the key)."""
        journal(world, "put_invoice", call)
        return f"invoiced {customer}"

    @tool(effect="side_effect", probe=in_journal)
    def send_fenced(to: str, *, call: ToolCall) -> str:
        """Send through a service that checks the lease's fence itself."""
        current_lease().check()
        if (world / "refuse").exists():
            raise LeaseLost(f"the mail service has seen a newer fence than {current_lease().fence}")
        journal(world, "send_fenced", call, to=to)
        return f"sent to {to}"

    return [send_email, read_file, big_result, put_invoice, send_fenced]


def twice(agent: Agent, run_id: str, driver: str) -> list[str]:
    """Two callers of one agent on one run at the same time, as two requests of one web server
    would: ``asyncio.gather`` of two ``arun``, or two threads calling ``run``."""

    def outcome(value: object) -> str:
        return getattr(value, "status", None) or type(value).__name__

    if driver == "async":

        async def both() -> list[object]:
            return list(
                await asyncio.gather(*(agent.arun("go", run_id=run_id) for _ in range(2)), return_exceptions=True)
            )

        return sorted(outcome(value) for value in asyncio.run(both()))
    results: list[object] = []

    def one() -> None:
        try:
            results.append(agent.run("go", run_id=run_id))
        except UnbrokenError as exc:
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcome(value) for value in results)


async def retry_after_cancel(agent: Agent, run_id: str, timeout: float) -> Any:
    """A request handler that times out and retries at once, in the same process and loop."""
    try:
        return await asyncio.wait_for(agent.arun("go", run_id=run_id), timeout)
    except TimeoutError:
        return await agent.arun("go", run_id=run_id)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("script", choices=sorted(SCRIPTS))
    parser.add_argument("--store", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--driver", choices=["sync", "async"], default="sync")
    parser.add_argument("--twice", action="store_true", help="two callers in this process on one run at once")
    parser.add_argument("--cancel-after", type=float, default=None, help="arun under asyncio.wait_for(timeout=)")
    parser.add_argument("--retry", action="store_true", help="after the timeout, arun again on the same loop")
    parser.add_argument("--max-result-bytes", default="default")
    parser.add_argument("--big-mb", type=int, default=100)
    parser.add_argument(
        "--probe", nargs="?", const="journal", default="none", choices=["none", "journal", "async-raise", "huge"]
    )
    parser.add_argument("--approval", action="store_true")
    parser.add_argument("--without", action="append", default=[], help="leave this tool out of the agent")
    parser.add_argument("--elsewhere", action="store_true", help="hold the run under an owner name of another host")
    options = parser.parse_args()
    extra: dict[str, Any] = {}
    if options.max_result_bytes != "default":
        extra["max_result_bytes"] = None if options.max_result_bytes == "none" else int(options.max_result_bytes)
    with open_store(options.store) as store:
        agent = Agent(
            ScriptedModel(SCRIPTS[options.script]),
            [
                t
                for t in build_tools(options.world, options.probe, options.big_mb, options.approval)
                if t.name not in options.without
            ],
            store,
            lease_ttl=5.0,
            **extra,
        )
        if options.twice:
            print(json.dumps({"outcomes": twice(agent, options.run_id, options.driver)}))
            return 0
        try:
            if options.cancel_after is not None and options.retry:
                result = asyncio.run(retry_after_cancel(agent, options.run_id, options.cancel_after))
            elif options.cancel_after is not None:
                result = asyncio.run(asyncio.wait_for(agent.arun("go", run_id=options.run_id), options.cancel_after))
            elif options.driver == "async":
                result = asyncio.run(agent.arun("go", run_id=options.run_id))
            elif options.elsewhere:
                # A holder on this host is never taken over while it lives (docs/effects.md, rule 2);
                # under another host's name, only its lease and the fence stand between it and the run.
                owner = make_owner().replace(socket.gethostname(), "elsewhere", 1)
                result = agent.run("go", run_id=options.run_id, owner=owner)
            else:
                result = agent.run("go", run_id=options.run_id)
        except (UnbrokenError, TimeoutError) as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            return 3
    print(json.dumps({"status": result.status, "turns": result.turns}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
