"""One agent process for the zombie-owner tests: a run with one side effect (``charge``).

Every execution of ``charge`` appends the call's idempotency key to ``--charges`` (a file
outside the store), so the test can count how many times the side effect really happened.
The probe reads that file truthfully. ``--pause`` says where and how this process stops:

* ``sigstop``: after the intent is saved, before the engine's execute point, it SIGSTOPs itself;
* ``gil``: at the same point, C code holding the GIL blocks on a pipe (``--gil-fd``) until the
  test writes a byte; no signal is involved, the heartbeat thread simply cannot run;
* ``tool-sigstop``: inside the tool, after the engine's check and before the charge;
* ``tool-wait``: inside the tool, waits (GIL released, heartbeat running) for ``<charges>.go``.
* ``charged-wait``: the same, but right after the charge (done, not yet recorded).
* ``tool-hold``: inside the tool, waits for ``<charges>.tool-go`` before charging (with
  ``--tool-timeout`` the tool runs in its own thread, so a Ctrl-C or a SIGTERM handler's
  ``sys.exit`` lands in the driver). Once interrupted, it runs the run again at once, writes
  ``<charges>.<name>.interrupted``, and runs it again after the tool's thread ended
  (``--after-interrupt rerun``); or writes that marker and waits for ``<charges>.go`` (``linger``).

With ``--tool-checks`` the tool calls ``current_lease().check()`` right before it charges.

It writes ``<charges>.<name>.paused`` when it reaches the pause, ``<charges>.<name>.probed`` each time
the probe is asked, and prints one JSON line with how the run ended. With ``--stop-after-probe``
it SIGSTOPs inside its first probe, after reading the charges: the test then lets a frozen holder
act before this one goes on, whatever the machine's load (its answer is the one it read).
``--without-fencing`` switches the mechanism under test off (to show the tests fail without it).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import email.utils
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from unbroken import (
    Agent,
    Found,
    NotExecuted,
    ScriptedModel,
    ToolCall,
    crashpoints,
    current_lease,
    open_store,
    tool,
)
from unbroken.errors import LeaseHeld, LeaseLost
from unbroken.leases import make_owner
from unbroken.tools import ProbeAnswer

USAGE = {"input_tokens": 10, "output_tokens": 5}
SCRIPT: list[dict[str, Any]] = [
    {
        "content": [{"type": "tool_use", "id": "toolu_charge", "name": "charge", "input": {"cents": 500}}],
        "stop_reason": "tool_use",
        "usage": USAGE,
    },
    {"content": [{"type": "text", "text": "charged"}], "stop_reason": "end_turn", "usage": USAGE},
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--charges", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument(
        "--pause",
        choices=["none", "sigstop", "gil", "tool-sigstop", "tool-wait", "tool-hold", "charged-wait"],
        default="none",
    )
    parser.add_argument("--tool-timeout", type=float, default=None, help="the charge tool's timeout")
    parser.add_argument("--arun", action="store_true", help="drive the run with Agent.arun")
    parser.add_argument("--exit-on-sigterm", action="store_true", help="a SIGTERM handler that calls sys.exit")
    parser.add_argument(
        "--after-interrupt",
        choices=["rerun", "linger"],
        default="rerun",
        help="once interrupted: run again in this process (as a notebook), or wait for <charges>.go",
    )
    parser.add_argument("--gil-fd", type=int, default=-1)
    parser.add_argument("--tool-checks", action="store_true", help="the tool checks its lease right before charging")
    parser.add_argument(
        "--without-fencing", default="", help="check,grace,inherit,owner,tool,alive (or all): parts to switch off"
    )
    parser.add_argument(
        "--wait-after-open",
        action="store_true",
        help="open the store, read it, write <charges>.<name>.opened, then wait for <charges>.<name>.go-on",
    )
    parser.add_argument("--elsewhere", action="store_true", help="hold the run under an owner name of another host")
    parser.add_argument("--forked", action="store_true", help="run in a forked child under agent.owner")
    parser.add_argument(
        "--owner-form",
        choices=["current", "no-start", "legacy"],
        default="current",
        help="hold the run under this process's name without its start time (0, as written when /proc "
        "could not be read) or in the older 4-part form host:pid:start:nonce",
    )
    parser.add_argument(
        "--stop-after-probe",
        action="store_true",
        help="SIGSTOP in the first probe, its answer already read (the test orders what happens meanwhile)",
    )
    args = parser.parse_args()
    charges = Path(args.charges)
    marker = Path(f"{charges}.{args.name}")

    def mark(what: str) -> None:
        Path(f"{marker}.{what}").touch()

    held: list[bool] = []

    def pause_here() -> None:
        mark("paused")
        if args.pause in ("sigstop", "tool-sigstop"):
            os.kill(os.getpid(), signal.SIGSTOP)
        elif args.pause == "gil":
            buffer = ctypes.create_string_buffer(1)
            ctypes.PyDLL(None).read(args.gil_fd, buffer, 1)  # PyDLL: the GIL stays held while it blocks
        elif args.pause == "tool-wait":
            while not Path(f"{charges}.go").exists():
                time.sleep(0.02)
        elif args.pause == "tool-hold" and not held:
            # In the tool's own thread (it has a timeout), so a Ctrl-C lands in the driver; it
            # goes on (and charges) once the test creates <charges>.tool-go. Only the first
            # execution in this process holds: a re-run's own execution charges at once.
            held.append(True)
            deadline = time.monotonic() + 60
            while not Path(f"{charges}.tool-go").exists() and time.monotonic() < deadline:
                time.sleep(0.02)

    probes: list[bool] = []

    def charged(call: ToolCall) -> ProbeAnswer:
        mark("probed")
        done = charges.exists() and call.idempotency_key in charges.read_text().split()
        if args.stop_after_probe and not probes:
            probes.append(done)
            os.kill(os.getpid(), signal.SIGSTOP)  # answers what it read before the stop
        return Found("charged") if done else NotExecuted()

    @tool(effect="side_effect", probe=charged, timeout=args.tool_timeout)
    def charge(cents: int, *, call: ToolCall) -> str:
        """Charge the customer's card."""
        if args.pause in ("tool-sigstop", "tool-wait", "tool-hold"):
            pause_here()
        if args.tool_checks and "tool" not in off:
            current_lease().check()  # LeaseLost: nothing is charged
        with charges.open("a") as out:
            out.write(call.idempotency_key + "\n")
            out.flush()
            os.fsync(out.fileno())
        if args.pause == "charged-wait":
            mark("paused")
            while not Path(f"{charges}.go").exists():
                time.sleep(0.02)
        return f"charged {cents}"

    if args.pause in ("sigstop", "gil"):
        crashpoints.observe(lambda label: pause_here() if label == "tool.before_execute" else None)
    off = switch_fencing_off(args.without_fencing) if args.without_fencing else set()

    store = open_store(args.store)
    agent = Agent(ScriptedModel(SCRIPT), [charge], store, lease_ttl=args.ttl)
    # Another host's name: nothing about this holder can be proven here (alive or dead), as
    # for a holder on another machine; the lease's expiry and the fence are all there is.
    owner = make_owner().replace(socket.gethostname(), "elsewhere", 1) if args.elsewhere else None
    if args.owner_form != "current":
        host, pid, start, nonce, boot, namespace = make_owner().split(":")
        owner = (
            f"{host}:{pid}:0:{nonce}:{boot}:{namespace}"
            if args.owner_form == "no-start"
            else f"{host}:{pid}:{start}:{nonce}"
        )
    if args.forked:
        # As a pre-forking server does: the agent is built, then a forked child runs the run
        # under the agent's owner name (as a Worker does); the parent waits for the test to
        # touch <charges>.<name>.orphan and exits, leaving its child running.
        if os.fork() != 0:
            while not Path(f"{marker}.orphan").exists():
                time.sleep(0.02)
            os._exit(0)
        Path(f"{marker}.pid").write_text(str(os.getpid()))
        owner = agent.owner

    def run_once() -> dict[str, Any]:
        try:
            if args.arun:
                result = asyncio.run(agent.arun("charge the customer once", run_id=args.run_id, owner=owner))
            else:
                result = agent.run("charge the customer once", run_id=args.run_id, owner=owner)
            return {"status": result.status, "reconciled": result.reconciled}
        except (LeaseLost, LeaseHeld) as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
        except (KeyboardInterrupt, SystemExit) as exc:
            return {"interrupted": type(exc).__name__}

    if args.wait_after_open:
        store.exists(args.run_id)  # the store has been reached: its clock has been read
        mark("opened")
        while not Path(f"{marker}.go-on").exists():
            select.select([], [], [], 0.02)  # not time.sleep: under libfaketime it fails (EINVAL)
    if args.exit_on_sigterm:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    outcome = run_once()
    if "interrupted" in outcome:
        # Interrupted while the tool's thread still sleeps before charging: what a notebook (or
        # a process that goes on) does next must not charge again.
        if args.after_interrupt == "rerun":
            again = run_once()  # at once: the tool of the first call may still act
            mark("interrupted")
            while any(t.name.startswith("unbroken-tool-") for t in threading.enumerate()):
                time.sleep(0.02)
            outcome = {**outcome, "rerun_at_once": again, "rerun_after": run_once()}
        else:
            mark("interrupted")
            while not Path(f"{charges}.go").exists():
                time.sleep(0.02)
        while any(t.name.startswith("unbroken-tool-") for t in threading.enumerate()):
            time.sleep(0.02)  # what the abandoned tool does is counted before this process reports
    print(json.dumps(outcome), flush=True)
    store.close()
    return 0


def switch_fencing_off(parts: str) -> set[str]:
    """The mechanism removed, in ``parts`` (comma-separated, or ``all``): ``check`` (no check
    before acting), ``grace`` (no wait after a takeover), ``owner`` (a holder is judged dead by
    its pid alone, as before boot id and PID namespace were compared), ``tool`` (the tool does
    not check its lease itself), ``alive`` (a holder alive on this host is taken over once a
    clock says its lease expired), ``inherit`` (an attempt in doubt is judged by how our
    predecessor gave the run up, even when an older holder started it), ``acting`` (a tool left
    running by its interrupted call is not counted: the lease is released at once),
    ``service-clock`` (S3: the service's clock is this machine's wall clock plus an offset read
    once, at open), ``boot-clock`` (SQLite, the file store: leases judged on the wall clock),
    ``start-time`` (a holder on this host is judged by its pid alone: a pid that runs is that
    holder, whatever its start time), ``unreadable-start`` (a holder whose start time cannot be
    read, hidden /proc or a name without one, counts as gone). Returns the parts switched off."""
    from unbroken import fencing, leases, owners

    checked_acting = fencing.LeaseGuard.acting

    def acting(self: fencing.LeaseGuard, effect: str) -> Any:
        return checked_acting(self, "read_only")  # read-only tools are not checked

    def pid_only_is_dead(owner: str) -> bool:
        parts = owner.split(":")
        pid = int(parts[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = leases._proc_stat(pid)
        return stat is None or stat[1] != parts[2]

    off = (
        {"check", "grace", "inherit", "owner", "tool", "alive", "acting", "service-clock"}
        if parts == "all"
        else set(parts.split(","))
    )
    if "acting" in off:
        owners.still_acting = lambda owner, run_id: 0
    if "boot-clock" in off:
        from unbroken import clock as clocks
        from unbroken.stores import _boot_lease_clock

        _boot_lease_clock.BootLeaseClock.now = lambda self: clocks.wall()  # type: ignore[method-assign]
    if "service-clock" in off:
        from unbroken import clock
        from unbroken.stores import _s3_clock

        offsets: dict[int, float] = {}

        def observe_once(self: _s3_clock.ServiceClock, sent: float, received: float, date: str | None) -> None:
            if date and id(self) not in offsets:
                offsets[id(self)] = email.utils.parsedate_to_datetime(date).timestamp() - clock.wall()

        _s3_clock.ServiceClock.observe = observe_once  # type: ignore[method-assign]
        _s3_clock.ServiceClock.now = lambda self: clock.wall() + offsets.get(id(self), 0.0)  # type: ignore[method-assign]
    if "alive" in off:
        owners.owner_is_alive = lambda owner: False
    if "check" in off:
        fencing.LeaseGuard.acting = acting  # type: ignore[method-assign,assignment]
    if "grace" in off:
        fencing.LeaseGuard.absence_needs_wait = lambda self, entry=None: 0.0  # type: ignore[method-assign]
    if "inherit" in off:
        fencing.LeaseGuard.started_before_predecessor = lambda self, entry: False  # type: ignore[method-assign]
    if "owner" in off:
        leases.owner_is_dead = pid_only_is_dead
    if "start-time" in off:

        def pid_only_state(pid: int, start: str) -> str:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return "gone"
            stat = owners._proc_stat(pid)
            return "gone" if stat is not None and stat[0] in ("Z", "X") else "alive"

        owners._process_state = pid_only_state
    if "unreadable-start" in off:
        checked_state, checked_local = owners._process_state, owners._local_pid

        def unreadable_is_gone(pid: int, start: str) -> str:
            state = checked_state(pid, start)
            return "gone" if state == "unknown" or start == "0" else state

        def any_start(owner: str) -> tuple[int, str] | None:
            parts = owner.split(":")
            if len(parts) == 6 and parts[2] == "0":
                return int(parts[1]), "0"
            return checked_local(owner)

        owners._process_state = unreadable_is_gone
        owners._local_pid = any_start
    return off


if __name__ == "__main__":
    sys.exit(main())
