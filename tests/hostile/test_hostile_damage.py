"""Issue 9.2 as an outside auditor would try it: a run damaged by hand between two real
processes, then resumed with ``Agent.run`` / ``Agent.arun``; and the explicit ``recover``
used the ways an operator might misuse it (twice, on a healthy run, with a call in flight)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_kit import CHILD, delete_record, edit_ledger, executions, run_child, tool_results

from unbroken import ConfigError, open_store
from unbroken.ops import recover

RUN = "audit-run"


def two_sends_then_killed(store_url: str, world: Path, driver: str) -> None:
    """Turns 1 and 2 send their email; the process is SIGKILLed as the third is about to run
    (its intent is saved: a call in flight)."""
    child = run_child("three_sends", store_url, RUN, world, "--driver", driver, crash_at="tool.before_execute:3")
    assert child.killed, child.stderr
    assert executions(world)["send_email"] == 2


def stored_seqs(store_url: str) -> list[int]:
    with open_store(store_url) as store:
        return [record.seq for record in store.read_records(RUN)]


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_run_with_a_record_deleted_by_hand_stops_with_corrupt_checkpoint_and_sends_nothing_again(
    store_url: str, world: Path, driver: str, which: str
) -> None:
    two_sends_then_killed(store_url, world, driver)
    seqs = stored_seqs(store_url)
    delete_record(store_url, RUN, seqs[len(seqs) // 2] if which == "middle" else seqs[-1])
    left = stored_seqs(store_url)

    resumed = run_child("three_sends", store_url, RUN, world, "--driver", driver)

    assert resumed.outcome["error"] == "CorruptCheckpoint", resumed.stdout + resumed.stderr
    assert "recover" in resumed.outcome["message"]
    assert stored_seqs(store_url) == left, "nothing is deleted or rewritten"
    assert executions(world)["send_email"] == 2


def test_a_ledger_entry_edited_by_hand_to_say_succeeded_is_never_trusted(
    store_url: str, world: Path, driver: str
) -> None:
    two_sends_then_killed(store_url, world, driver)
    edit_ledger(store_url, RUN, "pending", "succeeded")

    resumed = run_child("three_sends", store_url, RUN, world, "--driver", driver)

    assert resumed.outcome.get("error") == "CorruptCheckpoint", resumed.stdout + resumed.stderr
    assert executions(world)["send_email"] == 2


def test_recover_after_a_kill_mid_side_effect_and_a_damaged_record_names_the_in_doubt_call(
    store_url: str, world: Path, driver: str
) -> None:
    # The third email WAS sent (killed after it ran, before its result was saved), then a
    # record in the middle is lost. Recovery must not let the model believe it was never sent.
    child = run_child("three_sends", store_url, RUN, world, "--driver", driver, crash_at="tool.after_execute:3")
    assert child.killed and executions(world)["send_email"] == 3
    seqs = stored_seqs(store_url)
    delete_record(store_url, RUN, seqs[2])

    with open_store(store_url) as store:
        done = recover(store, RUN)
        state = store.load(RUN)
        assert store.ledger_list(RUN), "the ledger is kept"
    told = state.messages[-1]["content"]
    assert "c@example.com" in told or "toolu_3" in told, told
    assert "may have taken effect" in told and "do not repeat" in told
    assert len(done.told) >= 2

    finished = run_child("three_sends", store_url, RUN, world, "--driver", driver, "--probe")
    assert finished.returncode == 0, finished.stderr
    with open_store(store_url) as store:
        assert store.load(RUN).phase == "completed"


def test_recover_run_twice_refuses_the_second_time_and_the_run_still_finishes(sqlite_url: str, world: Path) -> None:
    two_sends_then_killed(sqlite_url, world, "sync")
    delete_record(sqlite_url, RUN, stored_seqs(sqlite_url)[1])
    with open_store(sqlite_url) as store:
        first = recover(store, RUN)
        after_first = [(r.seq, r.body) for r in store.read_records(RUN)]
        with pytest.raises(ConfigError, match="intact"):
            recover(store, RUN)
        assert [(r.seq, r.body) for r in store.read_records(RUN)] == after_first
        assert store.exists(first.kept_aside)
    resumed = run_child("three_sends", sqlite_url, RUN, world)
    assert resumed.returncode == 0, resumed.stderr


def test_recover_refuses_a_run_that_is_not_damaged_and_changes_nothing(sqlite_url: str, world: Path) -> None:
    two_sends_then_killed(sqlite_url, world, "sync")
    with open_store(sqlite_url) as store:
        before = [(r.seq, r.body) for r in store.read_records(RUN)]
        with pytest.raises(ConfigError, match="intact"):
            recover(store, RUN)
        assert [(r.seq, r.body) for r in store.read_records(RUN)] == before
        assert [run for run in store.list_runs() if run.run_id != RUN] == []
    # The call in flight is still settled by the normal resume (probe), once.
    resumed = run_child("three_sends", sqlite_url, RUN, world, "--probe")
    assert resumed.returncode == 0, resumed.stderr
    assert executions(world)["send_email"] == 3
    with open_store(sqlite_url) as store:
        assert len(tool_results(store.load(RUN).messages)) == 3


@pytest.mark.slow
def test_a_holder_frozen_while_an_operator_recovers_its_damaged_run_never_writes_or_sends_after_waking(
    sqlite_url: str, world: Path
) -> None:
    # Turn 1 sent an email; the process is frozen (SIGSTOP) inside turn 2's read, its lease
    # runs out, a record is found damaged and an operator recovers the run. The holder wakes.
    # It holds the run under another host's name: a frozen holder on this host is never taken
    # over while it lives (recover is refused, tests/faults/test_zombie_alive.py), so only from
    # another host do the lease's end and the fence decide.
    (world / "pause").touch()
    args = ["send_read_send", "--store", sqlite_url, "--run-id", RUN, "--world", str(world), "--elsewhere"]
    holder = subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (world / "paused").exists():
            assert time.monotonic() < deadline and holder.poll() is None, "the holder never reached the read"
            time.sleep(0.02)
        os.kill(holder.pid, signal.SIGSTOP)
        delete_record(sqlite_url, RUN, stored_seqs(sqlite_url)[1])
        time.sleep(7.0)  # the child's lease_ttl is 5 s
        with open_store(sqlite_url) as store:
            recover(store, RUN)
            recovered = [(r.seq, r.body) for r in store.read_records(RUN)]
        os.kill(holder.pid, signal.SIGCONT)
        (world / "pause").unlink()
        stdout, stderr = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert '"LeaseLost"' in stdout.decode(), stdout.decode() + stderr.decode()[-2000:]
    assert executions(world)["send_email"] == 1, "the woken holder sent nothing more"
    with open_store(sqlite_url) as store:
        assert [(r.seq, r.body) for r in store.read_records(RUN)] == recovered, "and wrote nothing"
