"""The lease is released only when nothing of ours can still act.

A ``@tool(timeout=...)`` side effect runs in a thread of its own. When the call that started it
ends early (Ctrl-C, or ``sys.exit`` from a SIGTERM handler, under ``run`` or ``arun``), that
thread goes on and charges later (when the test lets it). Until it returns, the run's lease is not released:
a re-run in the same process (a notebook) or in another process is refused (``LeaseHeld``)
instead of probing "not executed" and charging again. Once the thread has returned, the lease
is released by it and a re-run settles the call from the probe: one charge.
With ``ZOMBIE_WITHOUT_FENCING=acting`` the lease is released at once and the side effect
happens twice.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from zombie_child import SCRIPT
from zombie_world import ZombieWorld

from unbroken import Agent, ScriptedModel, open_store, tool
from unbroken.errors import LeaseHeld

SIGNALS = {"ctrl-c": ("SIGINT", ()), "sigterm-exit": ("SIGTERM", ("--exit-on-sigterm",))}
CASES = [
    ("run", "ctrl-c", "same process"),
    ("arun", "sigterm-exit", "another process"),
]
SLOW_CASES = [  # make reliability: every driver, way out and re-run
    ("arun", "sigterm-exit", "same process"),
    ("run", "sigterm-exit", "another process"),
    ("arun", "ctrl-c", "another process"),
    ("arun", "ctrl-c", "same process"),
    ("run", "sigterm-exit", "same process"),
    ("run", "ctrl-c", "another process"),
]


@pytest.fixture
def sqlite_world(tmp_path: Path) -> Iterator[ZombieWorld]:
    world = ZombieWorld(f"sqlite:///{tmp_path / 'runs.db'}", tmp_path)
    yield world
    world.close()


@pytest.mark.parametrize(
    ("driver", "how", "rerun"),
    [*CASES, *(pytest.param(*case, marks=pytest.mark.slow) for case in SLOW_CASES)],
)
def test_an_interrupted_call_keeps_its_lease_until_its_tool_thread_returns(
    sqlite_world: ZombieWorld, driver: str, how: str, rerun: str
) -> None:
    world = sqlite_world
    signal_name, options = SIGNALS[how]
    after = "rerun" if rerun == "same process" else "linger"
    args = ["--pause", "tool-hold", "--tool-timeout", "30", "--ttl", "1", "--after-interrupt", after, *options]
    first = world.start("first", *args, *(["--arun"] if driver == "arun" else []))
    world.wait_for("first", "paused", first)  # the tool's thread waits before charging
    first.send_signal(getattr(signal, signal_name))
    world.wait_for("first", "interrupted", first)
    tool_go = world.charges_file.with_suffix(".txt.tool-go")
    if rerun == "same process":
        tool_go.touch()  # the abandoned tool goes on and charges; its thread then releases the lease
        outcome = world.finish(first)
        assert world.charges() == 1, outcome
        assert outcome["rerun_at_once"]["error"] == "LeaseHeld", outcome
        assert "(this process)" in outcome["rerun_at_once"]["message"]
        assert outcome["rerun_after"]["status"] == "completed", outcome
        return
    at_once = world.finish(world.start("second", "--ttl", "1"))  # the first still lives, its tool too
    tool_go.touch()
    world.wait_charged(1)  # the abandoned tool charges; its thread then releases the lease
    after_thread = world.finish(world.start("third", "--ttl", "1"))
    world.charges_file.with_suffix(".txt.go").touch()
    interrupted = world.finish(first)
    assert world.charges() == 1, (at_once, after_thread, interrupted)
    assert at_once["error"] == "LeaseHeld" and f"(pid {first.pid}, since " in at_once["message"]
    assert after_thread["status"] == "completed", after_thread
    assert after_thread["reconciled"] == [["toolu_charge", "charge", "probed"]]


def test_a_run_that_abandoned_a_side_effect_past_its_timeout_keeps_its_lease_until_it_returns(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    returned = threading.Event()

    @tool(effect="side_effect", timeout=0.1)
    def charge(cents: int) -> str:
        """Charge the customer's card (slowly)."""
        time.sleep(0.8)
        returned.set()
        return f"charged {cents}"

    agent = Agent(ScriptedModel(SCRIPT), [charge], store, lease_ttl=5)
    agent.run("charge once", run_id="slow-charge")  # the call is abandoned, the run goes on and ends
    assert not returned.is_set()
    held = store.lease_of("slow-charge")
    assert held is not None, "released while the abandoned tool may still charge"
    with pytest.raises(LeaseHeld, match=r"\(this process\)"):
        agent.run("charge once", run_id="slow-charge")
    assert returned.wait(5)
    deadline = time.monotonic() + 5
    while store.lease_of("slow-charge") is not None:  # released by the tool's thread as it ends
        assert time.monotonic() < deadline, "never released after the tool returned"
        time.sleep(0.02)
    store.close()
