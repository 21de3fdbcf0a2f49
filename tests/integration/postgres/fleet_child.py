"""A worker process for the fleet tests and the fleet benchmark.

Runs ``Worker`` over a store with a short scripted agent (one side-effecting tool call, then
a final answer) and appends one JSON line per event to ``--log`` (opened O_APPEND and written
with one ``os.write`` per line, so a SIGKILL never leaves half a line):

    ["ready", pid, t]                          the worker is about to claim
    ["lease", run_id, fence, owner, expires_at, t]   a claim or an acquisition succeeded
    ["write", what, run_id, fence, "ok"|"refused", t]  a fenced write and its outcome
    ["exec", idempotency_key, pid, t]           the side-effecting tool ran
    ["tool_started", run_id_key, t]             (with --tool-sleep) the tool is about to sleep
    ["done", run_id, status, t]                 a run ended
    ["stats", {...}]                            the worker returned

``--skew SECONDS`` shifts this process's ``time.time`` (leases must not care).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--ttl", type=float, default=30.0)
parser.add_argument("--poll", type=float, default=0.1)
parser.add_argument("--concurrency", type=int, default=1)
parser.add_argument("--tool-sleep", type=float, default=0.0)
parser.add_argument("--skew", type=float, default=0.0)
parser.add_argument("--until-idle", action="store_true")
parser.add_argument("--turns", type=int, default=1, help="tool-calling turns per run before the final answer")
parser.add_argument("--elsewhere", action="store_true", help="hold leases under an owner name of another host")
args = parser.parse_args()

if args.skew:
    # Before importing unbroken: dataclass default factories capture time.time at import.
    _real_time = time.time
    time.time = lambda: _real_time() + args.skew

from unbroken import Agent, ScriptedModel, ToolCall, tool  # noqa: E402
from unbroken.errors import LeaseError  # noqa: E402
from unbroken.stores import open_store  # noqa: E402
from unbroken.stores.base import Store  # noqa: E402
from unbroken.worker import Worker  # noqa: E402

if args.elsewhere:
    # Another host's name: nothing about this holder can be proven here (alive or dead), as for
    # a worker on another machine; its lease's expiry and the fence are all there is. (A holder
    # alive on this host is never taken over at all: stores.backend.claimable.)
    import socket

    import unbroken.owners
    import unbroken.runner

    _make_owner = getattr(unbroken.owners, "make_owner")  # noqa: B009
    _elsewhere = lambda: _make_owner().replace(socket.gethostname(), "elsewhere", 1)  # noqa: E731
    # Both names a holder's name is made with: an Agent's own (owners.ProcessOwner) and a call's.
    setattr(unbroken.owners, "make_owner", _elsewhere)  # noqa: B010
    setattr(unbroken.runner, "make_owner", _elsewhere)  # noqa: B010

_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def note(*parts: Any) -> None:
    os.write(_fd, (json.dumps([*parts, time.time()]) + "\n").encode())


def watch(store: Store) -> None:
    """Log every lease this process gets and every fenced write it attempts, with its outcome."""
    acquire, claim = store.acquire_lease, store.claim_runnable
    append, ledger_claim, ledger_put, renew = store.append, store.ledger_claim, store.ledger_put, store.renew_lease

    def acquire_lease(run_id: str, owner: str, ttl: float, **kw: Any) -> Any:
        lease = acquire(run_id, owner, ttl, **kw)
        note("lease", run_id, lease.fence, owner, lease.expires_at)
        return lease

    def claim_runnable(owner: str, ttl: float, **kw: Any) -> Any:
        claimed = claim(owner, ttl, **kw)
        for run in claimed:
            note("lease", run.run_id, run.lease.fence, owner, run.lease.expires_at)
        return claimed

    def fenced(what: str, fn: Any, run_id_of: Any, fence_of: Any) -> Any:
        def write(*a: Any, **kw: Any) -> Any:
            run_id, fence = run_id_of(*a, **kw), fence_of(*a, **kw)
            try:
                result = fn(*a, **kw)
            except LeaseError:
                note("write", what, run_id, fence, "refused")
                raise
            note("write", what, run_id, fence, "ok")
            return result

        return write

    store.acquire_lease = acquire_lease  # type: ignore[method-assign]
    store.claim_runnable = claim_runnable  # type: ignore[method-assign]
    store.append = fenced("append", append, lambda s, **kw: s.run_id, lambda s, **kw: kw.get("fence"))  # type: ignore[method-assign]
    store.ledger_claim = fenced("ledger", ledger_claim, lambda e, **kw: e.run_id, lambda e, **kw: kw.get("fence"))  # type: ignore[method-assign]
    store.ledger_put = fenced("ledger", ledger_put, lambda e, **kw: e.run_id, lambda e, **kw: kw.get("fence"))  # type: ignore[method-assign]
    store.renew_lease = fenced("renew", renew, lambda lease, ttl: lease.run_id, lambda lease, ttl: lease.fence)  # type: ignore[method-assign]


@tool(effect="side_effect")
def deliver(item: str, *, call: ToolCall) -> str:
    """Deliver an item (the side effect the tests count)."""
    if args.tool_sleep:
        note("tool_started", call.idempotency_key)
        time.sleep(args.tool_sleep)
    note("exec", call.idempotency_key, os.getpid())
    return f"delivered {item}"


def script() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {
            "content": [{"type": "tool_use", "id": f"c{i}", "name": "deliver", "input": {"item": f"parcel {i}"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        for i in range(args.turns)
    ]
    turns.append({"content": [{"type": "text", "text": "all delivered"}], "stop_reason": "end_turn", "usage": {}})
    return turns


def main() -> int:
    store = open_store(args.url)
    watch(store)

    def build(worker_store: Store) -> Agent:
        return Agent(ScriptedModel(script()), [deliver], worker_store, lease_ttl=args.ttl)

    worker = Worker(
        build,
        store,
        concurrency=args.concurrency,
        poll_interval=args.poll,
        retry_after=max(args.ttl, 0.5),
        on_finish=lambda result: note("done", result.run_id, result.status),
    )
    note("ready", os.getpid())
    stats = worker.run(until_idle=args.until_idle)
    note("stats", vars(stats))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
