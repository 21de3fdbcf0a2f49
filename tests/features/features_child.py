"""The child process of the feature crash tests, in a fresh interpreter so that SIGKILL
(armed by the parent through ``UNBROKEN_CRASH_AT``) loses everything not yet durable.

    python features_child.py run --store URL --run-id ID --outbox PATH [--driver sync|async] [--no-approval]
    python features_child.py approve|deny --store URL --run-id ID --call CALL [--reason R]
    python features_child.py continue --store URL --run-id ID --outbox PATH --message TEXT [--message-id M]
    python features_child.py fork --store URL --run-id ID --at SAVE --as NEW

The agent: one model turn that sends two emails through an approval-gated side-effect tool
(``toolu_a`` to a@example.com, ``toolu_b`` to b@example.com), then a final answer; for
``continue`` (no approval asked), one more email (``toolu_c``) and a final answer. Every email is one line
appended to ``outbox`` under an exclusive lock, with the call's idempotency key (what the probe
searches). On a normal exit the child prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import sys
import time
from pathlib import Path
from typing import Any

from features_scripts import final_turn, tool_turn

from unbroken import Agent, Found, NotExecuted, ScriptedModel, Tool, ToolCall, open_store, ops, tool


class Outbox:
    """A mailer with no deduplication: every request sends (one line, flock'ed, flushed)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def send(self, key: str, to: str) -> str:
        with open(self.path, "a", encoding="utf-8") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.write(json.dumps({"key": key, "to": to}) + "\n")
            out.flush()
        return f"sent to {to}"

    def sent(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line]


def mail_tool(outbox: Outbox, *, approval: bool = True, slow: float = 0.0) -> Tool:
    def find(call: ToolCall) -> Found | NotExecuted:
        for row in outbox.sent():
            if row["key"] == call.idempotency_key:
                return Found(f"sent to {row['to']}")
        return NotExecuted()

    @tool(effect="side_effect", probe=find, approval=approval)
    def send_email(to: str, *, call: ToolCall) -> str:
        """Send an email."""
        time.sleep(slow)
        return outbox.send(call.idempotency_key, to)

    return send_email


SCRIPT = [
    tool_turn(("toolu_a", "send_email", {"to": "a@example.com"}), ("toolu_b", "send_email", {"to": "b@example.com"})),
    final_turn("Both sent."),
]
FOLLOW_UP = [tool_turn(("toolu_c", "send_email", {"to": "c@example.com"})), final_turn("Sent to c too.")]


def make_agent(
    store_url: str, outbox: str, script: list[dict[str, Any]], *, approval: bool = True, slow: float = 0.0
) -> Agent:
    tools = [mail_tool(Outbox(outbox), approval=approval, slow=slow)]
    return Agent(model=ScriptedModel(script), tools=tools, store=open_store(store_url))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "approve", "deny", "continue", "fork"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--outbox", default="")
    parser.add_argument("--driver", choices=["sync", "async"], default="sync")
    parser.add_argument("--call", default="")
    parser.add_argument("--reason", default="not wanted")
    parser.add_argument("--message", default="")
    parser.add_argument("--message-id", default="")
    parser.add_argument("--no-approval", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0, help="seconds each email takes")
    parser.add_argument("--at", type=int, default=0)
    parser.add_argument("--as", dest="new_id", default="")
    args = parser.parse_args(argv)
    outcome: dict[str, Any]
    if args.mode in ("approve", "deny"):
        store = open_store(args.store)
        if args.mode == "approve":
            request = ops.approve(store, args.run_id, args.call)
        else:
            request = ops.deny(store, args.run_id, args.call, reason=args.reason)
        outcome = {"status": request.status}
    elif args.mode == "fork":
        store = open_store(args.store)
        fork = ops.fork(store, args.run_id, at=args.at, new_run_id=args.new_id)
        outcome = {"run_id": fork.run_id, "after": [effect.call_id for effect in fork.effects_after]}
    elif args.mode == "continue":
        agent = make_agent(args.store, args.outbox, SCRIPT + FOLLOW_UP, approval=False)
        result = agent.send(args.run_id, args.message, message_id=args.message_id or None)
        outcome = {"status": result.status, "turns": result.turns}
    else:
        agent = make_agent(args.store, args.outbox, SCRIPT, approval=not args.no_approval, slow=args.slow)
        task = "Email a and b"
        if args.driver == "async":
            result = asyncio.run(agent.arun(task, run_id=args.run_id))
        else:
            result = agent.run(task, run_id=args.run_id)
        outcome = {"status": result.status, "turns": result.turns}
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
