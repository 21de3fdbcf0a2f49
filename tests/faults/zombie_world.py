"""Agent processes sharing one run, and what they did (see zombie_child.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from unbroken import open_store

CHILD = Path(__file__).with_name("zombie_child.py")
RUN_ID = "zombie-run"
TIMEOUT = 30.0  # generous: the CI machine is loaded
# Set ZOMBIE_WITHOUT_FENCING=all (or check, grace, inherit, owner, tool, alive, acting) to run every
# child with that part of the mechanism switched off: the tests that rely on it must then fail (that is how they were
# checked; see zombie_child.switch_fencing_off).
_OFF = os.environ.get("ZOMBIE_WITHOUT_FENCING", "")
WITHOUT_FENCING = ("--without-fencing", _OFF) if _OFF else ()


class ZombieWorld:
    def __init__(self, store_url: str, tmp_path: Path, run_id: str = RUN_ID) -> None:
        self.store_url = store_url
        self.run_id = run_id
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.charges_file = tmp_path / "charges.txt"
        self.processes: list[subprocess.Popen[str]] = []
        self.store = open_store(store_url)

    def start(self, name: str, *args: str, prefix: tuple[str, ...] = (), **popen: Any) -> subprocess.Popen[str]:
        command = [*prefix, sys.executable, str(CHILD), "--store", self.store_url, "--run-id", self.run_id]
        command += ["--charges", str(self.charges_file), "--name", name, *args, *WITHOUT_FENCING]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
        self.processes.append(process)
        return process

    def marker(self, name: str, what: str) -> Path:
        return Path(f"{self.charges_file}.{name}.{what}")

    def wait_for(self, name: str, what: str, process: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not self.marker(name, what).exists():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited early: {process.communicate()}")
            assert time.monotonic() < deadline, f"{name} never reached {what}"
            time.sleep(0.02)

    def wait_stopped(self, process: subprocess.Popen[str]) -> None:
        """Until the process is in state T (stopped by SIGSTOP)."""
        deadline = time.monotonic() + TIMEOUT
        while Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the process never stopped"
            time.sleep(0.01)

    def wait_lease_expired(self) -> float:
        """Until nobody holds a live lease on the run (judged on the store's clock); seconds waited."""
        started = time.monotonic()
        while self.store.lease_of(self.run_id) is not None:
            assert time.monotonic() - started < TIMEOUT, "the frozen holder's lease never expired"
            time.sleep(0.05)
        return time.monotonic() - started

    def finish(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 0 and out.strip(), f"exit {process.returncode}: {out}\n{err}"
        outcome: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return outcome

    def ready(self, name: str, *args: str) -> subprocess.Popen[str]:
        """A process started, its store open, waiting for ``<charges>.<name>.go-on``: its start-up
        (seconds on a loaded machine) is not spent inside a grace it is meant to be tested in."""
        process = self.start(name, *args, "--wait-after-open")
        self.wait_for(name, "opened", process)
        return process

    def charge_while_stopped(
        self, first: subprocess.Popen[str], name: str, taker: subprocess.Popen[str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The frozen ``first`` charges while ``taker`` is stopped in its first probe, whose "not
        executed" (true when read, not yet evidence) it then returns: within its grace, however
        slowly the machine runs (a wall-clock race between the two was a flaky double charge).
        Returns (the taker's outcome, the first's outcome after waking)."""
        self.wait_for(name, "probed", taker)
        self.wait_stopped(taker)
        os.kill(first.pid, signal.SIGCONT)
        self.wait_charged(1)
        os.kill(taker.pid, signal.SIGCONT)
        woke = self.finish(first)
        return self.finish(taker), woke

    def wait_charged(self, count: int) -> None:
        """Until the side effect happened ``count`` times."""
        deadline = time.monotonic() + TIMEOUT
        while self.charges() < count:
            assert time.monotonic() < deadline, f"never charged {count} times"
            time.sleep(0.02)

    def charges(self) -> int:
        """How many times the side effect really happened."""
        return len(self.charges_file.read_text().split()) if self.charges_file.exists() else 0

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.communicate()
        self.store.close()


# ---------------------------------------------------------------------- the scenarios
# The frozen holders below run under an owner name of another host (``--elsewhere``): a holder
# alive on this host is never taken over at all (test_zombie_alive.py), so these scenarios are
# about the holders nothing can be proven of, which only the fence and the grace stop.


def frozen_by_sigstop(world: ZombieWorld) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first holder SIGSTOPs after its intent was saved, before the execute point; a second
    process takes over once the lease expired and finishes; then the first is continued.
    Returns (the second's outcome, the first's outcome after waking)."""
    first = world.start("first", "--elsewhere", "--pause", "sigstop", "--ttl", "1")
    world.wait_for("first", "paused", first)
    world.wait_stopped(first)
    world.wait_lease_expired()
    second = world.finish(world.start("second", "--ttl", "1"))
    os.kill(first.pid, signal.SIGCONT)
    return second, world.finish(first)


def starved_by_the_gil(world: ZombieWorld) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same, but the first holder is stuck in C code that holds the GIL (no signal)."""
    read_end, write_end = os.pipe()
    try:
        first = world.start(
            "first", "--elsewhere", "--pause", "gil", "--gil-fd", str(read_end), "--ttl", "1", pass_fds=(read_end,)
        )
        world.wait_for("first", "paused", first)
        world.wait_lease_expired()  # nobody renewed it: the heartbeat thread never got the GIL
        second = world.finish(world.start("second", "--ttl", "1"))
        os.write(write_end, b"x")  # the C call returns; the process goes on
    finally:
        os.close(read_end)
        os.close(write_end)
    return second, world.finish(first)


def frozen_inside_a_tool_that_checks(world: ZombieWorld) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first holder SIGSTOPs inside the tool, past the engine's check; a second process
    takes over and finishes; then the first is continued, and the tool checks its lease itself
    before charging."""
    first = world.start("first", "--elsewhere", "--pause", "tool-sigstop", "--tool-checks", "--ttl", "1")
    world.wait_for("first", "paused", first)
    world.wait_stopped(first)
    world.wait_lease_expired()
    second = world.finish(world.start("second", "--ttl", "1"))
    os.kill(first.pid, signal.SIGCONT)
    return second, world.finish(first)


def frozen_inside_the_tool(world: ZombieWorld) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first holder SIGSTOPs inside the tool, past the engine's check, before it charges.
    The second takes over after its expiry (grace = its lease ttl, 3 s); once its probe has said
    "not executed", the first is continued and charges within that grace."""
    first = world.start("first", "--elsewhere", "--pause", "tool-sigstop", "--ttl", "1")
    world.wait_for("first", "paused", first)
    world.wait_stopped(first)
    taker = world.ready("second", "--ttl", "3", "--stop-after-probe")
    world.wait_lease_expired()
    world.marker("second", "go-on").touch()
    return world.charge_while_stopped(first, "second", taker)


def frozen_then_a_middle_holder_dies(world: ZombieWorld) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first holder (another host's name) SIGSTOPs inside the tool, past the engine's check.
    Once its lease expired, a middle process takes the run over and is SIGKILLed while it waits
    out the first's grace; a third proves the middle dead (this host) and takes over (grace 1.5
    s): once its probe has said "not executed", the first is continued and charges.
    Returns (the third's outcome, the first's outcome after waking)."""
    first = world.start("first", "--elsewhere", "--pause", "tool-sigstop", "--ttl", "1")
    world.wait_for("first", "paused", first)
    world.wait_stopped(first)
    world.wait_lease_expired()
    middle = world.start("middle", "--ttl", "5")
    world.wait_for("middle", "probed", middle)  # it now waits out the first's grace (5 s)
    middle.kill()
    middle.communicate()
    third = world.ready("third", "--ttl", "1.5", "--stop-after-probe")
    world.marker("third", "go-on").touch()
    return world.charge_while_stopped(first, "third", third)
