"""The child process of the crash tests: one agent run (or one ledger race) against the
counting service, in a fresh interpreter so SIGKILL loses everything not yet durable.

    python crash_driver.py agent --store URL --run-id ID --service PATH --script matrix [--probe]
        [--driver sync|async]
    python crash_driver.py once --store URL --run-id ID --service PATH --go FILE

Crash points are armed by the parent through ``UNBROKEN_CRASH_AT`` in the environment, or with
``--kill-after A:n>B:m`` for a point that only counts once another was passed (SIGKILL at the
m-th ``B`` after the n-th ``A``). On a normal exit the driver prints one JSON line describing
how the run (or race) ended.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crash_service import CountingService

from unbroken import (
    Agent,
    EffectLedger,
    Found,
    NotExecuted,
    ScriptedModel,
    Tool,
    ToolCall,
    ToolResult,
    crashpoints,
    open_store,
    tool,
)

CUSTOMER = "customer@example.com"


def _turn(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "on it"}]
    blocks += [{"type": "tool_use", "id": call_id, "name": name, "input": args} for call_id, name, args in calls]
    return {"content": blocks, "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}}


FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {"input_tokens": 10}}

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    # One turn with a call of each class (settled in this order), then a second email, then done.
    "matrix": [
        _turn(
            ("toolu_read", "read_file", {"path": "orders.csv"}),
            ("toolu_put", "put_object", {"name": "report.txt", "body": "42 orders"}),
            ("toolu_mail", "send_email", {"to": CUSTOMER, "subject": "Your report"}),
        ),
        _turn(("toolu_mail2", "send_email", {"to": "boss@example.com", "subject": "Report sent"})),
        FINAL,
    ],
    # The seed incident: one email to the customer, then done.
    "seed": [_turn(("toolu_email", "send_email", {"to": CUSTOMER, "subject": "Your refund"})), FINAL],
    # A provider that reuses ids: call_0 every turn (the same email twice, then another one),
    # then call_0 twice in one turn.
    "reused_ids": [
        _turn(("call_0", "send_email", {"to": "a@example.com", "subject": "Hello"})),
        _turn(("call_0", "send_email", {"to": "a@example.com", "subject": "Hello"})),
        _turn(("call_0", "send_email", {"to": "b@example.com", "subject": "Other"})),
        _turn(
            ("call_0", "send_email", {"to": "c@example.com", "subject": "Twin 1"}),
            ("call_0", "send_email", {"to": "d@example.com", "subject": "Twin 2"}),
        ),
        FINAL,
    ],
    # A tool that kills its own process every time it runs (os._exit), of each class.
    "crash_loop_read": [_turn(("toolu_die", "die_reading", {})), FINAL],
    "crash_loop_send": [_turn(("toolu_die", "die_sending", {})), FINAL],
    # arun: a slow call changes business_state, then a fast sibling's result is saved.
    "slow_sibling": [_turn(("toolu_slow", "tally_slow", {}), ("toolu_fast", "tally_fast", {})), FINAL],
}

# The call ids each script makes, per tool class (used by the tests to know what to expect).
CALLS = {
    "matrix": {"read_only": "toolu_read", "idempotent": "toolu_put", "side_effect": "toolu_mail"},
    "seed": {"side_effect": "toolu_email"},
}


def build_tools(service: CountingService, probe: bool, asynchronous: bool = False) -> list[Tool]:
    """The tools of the scripts; with ``asynchronous``, each is an ``async def`` (with no
    await inside, so the crash points of one turn come in the same order under both drivers)."""

    def as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _as_async(fn) if asynchronous else fn

    @tool(effect="read_only")
    @as_async
    def read_file(path: str) -> str:
        """Read a file."""
        return service.read(path)

    @tool(effect="idempotent")
    @as_async
    def put_object(name: str, body: str, *, call: ToolCall) -> str:
        """Store an object."""
        return service.put(call.idempotency_key, name, body)

    def find_in_outbox(call: ToolCall) -> Found | NotExecuted:
        sent = service.find_sent(call.idempotency_key)
        return Found(sent) if sent is not None else NotExecuted()

    @tool(effect="side_effect", probe=find_in_outbox if probe else None)
    @as_async
    def send_email(to: str, subject: str, *, call: ToolCall) -> str:
        """Send an email."""
        return service.send(call.idempotency_key, to, subject)

    @tool(effect="read_only")
    def die_reading() -> str:
        """Read something so big that the process dies."""
        service.read("die")
        os._exit(137)

    @tool(effect="side_effect", probe=lambda call: NotExecuted())
    def die_sending(*, call: ToolCall) -> str:
        """Crash before sending (the probe truthfully says it never sent)."""
        service.read("die")
        os._exit(137)

    slow_changed = threading.Event()

    @tool(effect="read_only")
    def tally_slow(*, state: dict[str, Any]) -> str:
        """Count, slowly."""
        state["slow"] = state.get("slow", 0) + 1
        slow_changed.set()
        time.sleep(1.0)  # the fast sibling's result is saved meanwhile (and the process killed)
        return "slow counted"

    @tool(effect="read_only")
    def tally_fast(*, state: dict[str, Any]) -> str:
        """Count, fast, once the slow call has made its change (under arun, where they overlap)."""
        if asynchronous:
            slow_changed.wait(10)
        state["fast"] = state.get("fast", 0) + 1
        return "fast counted"

    return [read_file, put_object, send_email, die_reading, die_sending, tally_slow, tally_fast]


def _as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return run


def run_agent(args: argparse.Namespace) -> dict[str, Any]:
    service = CountingService(args.service)
    store = open_store(args.store)
    agent = Agent(
        model=ScriptedModel(SCRIPTS[args.script]),
        tools=build_tools(service, args.probe, asynchronous=args.driver == "async"),
        store=store,
        unknown_policy=args.policy,
    )
    task = "Send the customer their report"
    if args.driver == "async":
        result = asyncio.run(agent.arun(task, run_id=args.run_id))
    else:
        result = agent.run(task, run_id=args.run_id)
    return {"status": result.status, "resumed": result.resumed, "reconciled": result.reconciled}


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """Race other processes to run one email call through ``EffectLedger.run_once``."""
    service = CountingService(args.service)
    ledger = EffectLedger(open_store(args.store), args.run_id)
    call = ToolCall("toolu_race", "send_email", {"to": CUSTOMER}, idempotency_key=f"race-{args.run_id}")
    go = Path(args.go)
    go.with_name(f"{go.name}.ready.{os.getpid()}").touch()
    while not go.exists():  # start together: the parent creates the file once all are ready
        time.sleep(0.002)

    def execute() -> ToolResult:
        time.sleep(0.05)  # hold the claim long enough for the others to arrive
        return ToolResult(call.id, service.send(call.idempotency_key, CUSTOMER, "race"))

    result = ledger.run_once(call, execute, wait=20.0)
    return {"how": result.how, "content": result.content}


def arm_kill_after(spec: str) -> None:
    """SIGKILL this process at the m-th ``B`` after the n-th ``A`` (``spec`` is ``A:n>B:m``)."""
    first, second = (part.rpartition(":") for part in spec.split(">"))
    seen = {"first": 0, "second": 0}

    def observe(label: str) -> None:
        if seen["first"] < int(first[2]):
            seen["first"] += label == first[0]
        elif label == second[0]:
            seen["second"] += 1
            if seen["second"] == int(second[2]):
                os.kill(os.getpid(), signal.SIGKILL)

    crashpoints.observe(observe)


def write_at_schema(version: int) -> None:
    """Make this process write its records as an unbroken of checkpoint schema ``version`` did
    (schema 1: before schema 2), to crash it and resume the run with today's writer."""
    from unbroken.codec import Encoder

    encode = Encoder.encode

    def encode_at(self: Encoder, state: Any, *args: Any, **kwargs: Any) -> Any:
        state.schema_version = version
        return encode(self, state, *args, **kwargs)

    Encoder.encode = encode_at  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["agent", "once"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="matrix")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--policy", default="tell_model")
    parser.add_argument("--driver", choices=["sync", "async"], default="sync")
    parser.add_argument("--go", default="")
    parser.add_argument("--kill-after", default="")
    parser.add_argument("--schema", type=int, default=0, help="write every record at this checkpoint schema")
    args = parser.parse_args(argv)
    if args.kill_after:
        arm_kill_after(args.kill_after)
    if args.schema:
        write_at_schema(args.schema)
    outcome = run_agent(args) if args.mode == "agent" else run_once(args)
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
