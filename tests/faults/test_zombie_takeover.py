"""Taking a run over from a holder that is not provably dead.

A holder in another PID namespace (a container) is alive whatever its pid says on this host:
its run is not taken over while its lease lasts. A holder whose lease expired may still be
alive and frozen inside a tool, past every check: a "not executed" probe is trusted only once
the grace period after its expiry has passed (asked again then).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from zombie_world import (
    RUN_ID,
    ZombieWorld,
    frozen_inside_a_tool_that_checks,
    frozen_inside_the_tool,
    frozen_then_a_middle_holder_dies,
)

from unbroken.leases import owner_is_dead

NEW_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


def require_unshare() -> None:
    """Skip (or, with CI set, fail) unless this machine can start a process in a new PID namespace."""
    reason = None
    if shutil.which("unshare") is None:
        reason = "the unshare command is not installed (util-linux)"
    else:
        trial = subprocess.run([*NEW_PID_NAMESPACE, "true"], capture_output=True, text=True, timeout=30)
        if trial.returncode != 0:
            reason = f"unshare --pid needs root or CAP_SYS_ADMIN: {trial.stderr.strip()}"
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this test must run)")
    pytest.skip(reason)


def test_a_live_owner_in_another_pid_namespace_keeps_its_run(world: ZombieWorld) -> None:
    require_unshare()
    first = world.start("first", "--pause", "tool-wait", "--ttl", "1", prefix=NEW_PID_NAMESPACE)
    world.wait_for("first", "paused", first)  # inside the tool, before the charge, heartbeat running
    holder = world.store.lease_of(RUN_ID)
    assert holder is not None and not owner_is_dead(holder.owner)
    second = world.finish(world.start("second", "--ttl", "1"))
    assert second["error"] == "LeaseHeld"
    world.charges_file.with_suffix(".txt.go").touch()
    assert world.finish(first)["status"] == "completed"
    assert world.charges() == 1


def test_a_takeover_trusts_not_executed_only_after_the_expired_holders_grace(world: ZombieWorld) -> None:
    second, woke = frozen_inside_the_tool(world)
    assert woke["error"] == "LeaseLost"  # it charged, then its save was refused
    assert second["status"] == "completed" and second["reconciled"] == [["toolu_charge", "charge", "probed"]]
    assert world.charges() == 1


def test_the_grace_of_a_frozen_holder_outlives_the_death_of_the_holder_after_it(world: ZombieWorld) -> None:
    # The third took the run from a holder proven dead, but the attempt in doubt was the first's
    # (an older fence, recorded in its ledger entry): it waits the full grace before trusting.
    third, woke = frozen_then_a_middle_holder_dies(world)
    assert woke["error"] == "LeaseLost"  # it charged, then its save was refused
    assert third["status"] == "completed" and third["reconciled"] == [["toolu_charge", "charge", "probed"]]
    assert world.charges() == 1


def test_a_tool_that_checks_its_lease_at_the_last_moment_does_not_act_after_a_freeze(world: ZombieWorld) -> None:
    second, woke = frozen_inside_a_tool_that_checks(world)
    assert second["status"] == "completed"
    assert woke["error"] == "LeaseLost"
    assert world.charges() == 1
