"""A holder alive on this host is never taken over because a clock says its lease expired.

Same host, same boot, same PID namespace, its pid alive with the start time in its owner name:
that holder may still act (frozen by SIGSTOP, or simply busy in a tool while a wall clock
somewhere stepped). A second process is refused with ``LeaseHeld`` naming it, and the side
effect happens once. With ``ZOMBIE_WITHOUT_FENCING=alive`` (the rule switched off) the frozen
holder is taken over and the side effect happens twice. The stepped wall clock is closed twice
over: by this rule and by the boot clock the local stores judge leases on; it charges twice
only with both off (``ZOMBIE_WITHOUT_FENCING=alive,boot-clock``).
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from zombie_world import RUN_ID, ZombieWorld

A_STEP_OF_ONE_HOUR = ("faketime", "-f", "+1h")


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_holder_frozen_inside_its_tool_on_this_host_past_its_lease_is_never_taken_over(world: ZombieWorld) -> None:
    # Frozen past the engine's check and before the charge, for longer than its lease and the
    # grace: once taken over, a probe would truthfully say "not executed" and the run would
    # charge, then the holder would wake and charge too.
    first = world.start("first", "--pause", "tool-sigstop", "--ttl", "1")
    world.wait_for("first", "paused", first)
    world.wait_stopped(first)
    world.wait_lease_expired()  # its lease expired on every clock: it is frozen, not dead
    second = world.finish(world.start("second", "--ttl", "1"))
    os.kill(first.pid, signal.SIGCONT)
    woke = world.finish(first)
    assert world.charges() == 1, (second, woke)
    assert second["error"] == "LeaseHeld" and woke["status"] == "completed"
    assert f"held by a live process on this host (pid {first.pid}, since " in second["message"]


@pytest.mark.parametrize("store_url", ["sqlite", "file"], indirect=True)  # PostgreSQL judges on now()
def test_a_taker_whose_wall_clock_stepped_an_hour_ahead_does_not_take_a_live_holders_run(
    world: ZombieWorld,
) -> None:
    if shutil.which("faketime") is None:
        if os.environ.get("CI"):
            pytest.fail("faketime (libfaketime) is not installed (CI is set, so this test must run)")
        pytest.skip("faketime (libfaketime) is not installed")
    first = world.start("first", "--pause", "tool-wait", "--ttl", "1")
    world.wait_for("first", "paused", first)  # inside the tool, before the charge, heartbeat running
    head = world.store.backend.read_head(RUN_ID)
    assert head is not None and head.owner is not None  # held (whatever clock its expiry is on)
    env = {**os.environ, "DONT_FAKE_MONOTONIC": "1"}  # only the wall clock steps (NTP, a VM resume)
    second = world.finish(world.start("second", "--ttl", "1", prefix=A_STEP_OF_ONE_HOUR, env=env))
    world.charges_file.with_suffix(".txt.go").touch()
    woke = world.finish(first)
    assert world.charges() == 1, (second, woke)
    assert second["error"] == "LeaseHeld" and woke["status"] == "completed"
    assert f"held by a live process on this host (pid {first.pid}, since " in second["message"]
