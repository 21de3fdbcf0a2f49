"""New surfaces the issue-9 fixes opened, tried as a hostile operator with real processes: a
probe that is ``async`` and raises, the approval of a call whose arguments were edited in the
store by hand, a fork of a run with a call in doubt, and two processes started on one run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile_kit import CHILD, executions, journal, run_child, tool_results

from unbroken import ApprovalError, ConfigError, CorruptCheckpoint, open_store
from unbroken.cli import main
from unbroken.ops import approve, deny, fork, pending_approvals

RUN = "audit-run"


def test_an_async_probe_that_raises_leaves_the_call_unknown_and_never_sends_again(
    store_url: str, world: Path, driver: str
) -> None:
    child = run_child("three_sends", store_url, RUN, world, "--driver", driver, crash_at="tool.after_execute:1")
    assert child.killed and executions(world)["send_email"] == 1

    resumed = run_child("three_sends", store_url, RUN, world, "--driver", driver, "--probe", "async-raise")

    assert resumed.returncode == 0, resumed.stderr
    assert "was never awaited" not in resumed.stderr
    with open_store(store_url) as store:
        first = tool_results(store.load(RUN).messages)[0]
        (entry,) = [e for e in store.ledger_list(RUN) if e.call_id == "toolu_1"]
    assert first["is_error"] is True and "unknown" in first["content"].lower(), first
    assert entry.status == "unknown"
    assert Counter(line["to"] for line in journal(world))["a@example.com"] == 1


def _edit_record_bodies(sqlite_url: str, old: str, new: str) -> int:
    import sqlite3

    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    try:
        with conn:
            sql = "UPDATE unbroken_records SET body=replace(body, ?, ?) WHERE run_id=? AND body LIKE ?"
            return conn.execute(sql, (old, new, RUN, f"%{old}%")).rowcount
    finally:
        conn.close()


def test_approving_a_call_whose_arguments_were_edited_by_hand_is_refused_and_nothing_is_sent(
    sqlite_url: str, world: Path, driver: str
) -> None:
    waiting = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--approval")
    assert waiting.outcome["status"] == "awaiting_approval", waiting.stdout + waiting.stderr
    assert _edit_record_bodies(sqlite_url, "a@example.com", "evil@example.com") >= 1

    with open_store(sqlite_url) as store, pytest.raises(CorruptCheckpoint):
        approve(store, RUN, "toolu_1")
    resumed = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--approval")
    assert resumed.outcome.get("error") == "CorruptCheckpoint", resumed.stdout + resumed.stderr
    assert journal(world) == []


def test_a_fork_at_a_save_point_with_a_call_in_doubt_is_refused_and_writes_nothing(store_url: str, world: Path) -> None:
    child = run_child("three_sends", store_url, RUN, world, crash_at="tool.after_execute:3")
    assert child.killed and executions(world)["send_email"] == 3
    with open_store(store_url) as store:
        head = store.history(RUN)[-1].seq
        with pytest.raises(ConfigError, match="doubt"):
            fork(store, RUN, at=head)
        assert [run.run_id for run in store.list_runs()] == [RUN]
    resumed = run_child("three_sends", store_url, RUN, world, "--probe")
    assert resumed.returncode == 0, resumed.stderr
    assert executions(world)["send_email"] == 3


def test_two_processes_started_on_one_run_at_once_send_each_email_once(store_url: str, world: Path) -> None:
    args = [sys.executable, str(CHILD), "three_sends", "--store", store_url, "--run-id", RUN, "--world", str(world)]
    processes = [subprocess.Popen([*args, "--probe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    processes.append(subprocess.Popen([*args, "--probe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [process.communicate(timeout=120) for process in processes]
    assert all(process.returncode in (0, 3) for process in processes), outs
    assert any(process.returncode == 0 for process in processes), outs
    for process, (stdout, _) in zip(processes, outs, strict=True):
        if process.returncode == 3:
            assert '"LeaseHeld"' in stdout or '"ConcurrentSave"' in stdout, stdout
    assert Counter(line["to"] for line in journal(world)) == {
        "a@example.com": 1,
        "b@example.com": 1,
        "c@example.com": 1,
    }


def test_a_tool_that_raises_lease_lost_itself_ends_the_run_with_the_call_in_doubt_not_failed(
    sqlite_url: str, world: Path, driver: str
) -> None:
    # docs/effects.md: a tool's own `current_lease().check()` or fenced service raising LeaseLost
    # means "nothing was done"; the intent stays pending and the next holder settles it.
    (world / "refuse").touch()
    refused = run_child("fenced", sqlite_url, RUN, world, "--driver", driver)
    assert refused.outcome.get("error") == "LeaseLost", refused.stdout + refused.stderr[-2000:]
    with open_store(sqlite_url) as store:
        (entry,) = store.ledger_list(RUN)
        assert entry.status == "pending" and store.load(RUN).pending_calls
    (world / "refuse").unlink()
    resumed = run_child("fenced", sqlite_url, RUN, world, "--driver", driver)
    assert resumed.outcome == {"status": "completed", "turns": 2}, resumed.stderr[-2000:]
    assert executions(world)["send_fenced"] == 1


def test_two_callers_in_one_process_on_one_run_do_not_take_the_live_run_from_each_other(
    sqlite_url: str, world: Path, driver: str
) -> None:
    # Two requests of one web server resume the same run at once (same Agent, same process).
    done = run_child("three_sends", sqlite_url, RUN, world, "--driver", driver, "--twice")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.outcome["outcomes"] == ["LeaseHeld", "completed"], done.stdout
    assert Counter(line["to"] for line in journal(world)) == {
        "a@example.com": 1,
        "b@example.com": 1,
        "c@example.com": 1,
    }
    with open_store(sqlite_url) as store:
        assert all(entry.status == "succeeded" for entry in store.ledger_list(RUN)), "no email was left unknown"


def test_approving_by_a_call_id_the_provider_repeated_in_one_turn_is_refused_until_named_by_key(
    sqlite_url: str, world: Path, driver: str
) -> None:
    waiting = run_child("dup_ids", sqlite_url, RUN, world, "--driver", driver, "--approval")
    assert waiting.outcome["status"] == "awaiting_approval", waiting.stdout + waiting.stderr
    with open_store(sqlite_url) as store:
        with pytest.raises(ApprovalError, match="share the call id"):
            approve(store, RUN, "call_0")  # the person looked at one of two requests named call_0
        listed = CliRunner().invoke(main, ["approvals", RUN, "--store", sqlite_url]).output
        assert all(request.key in "".join(listed.split()) for request in pending_approvals(store, RUN)), listed
        assert {request.status for request in pending_approvals(store, RUN)} == {"requested"}
        for request in pending_approvals(store, RUN):
            if request.input == {"to": "y@example.com"}:
                approve(store, RUN, request.key)
            else:
                deny(store, RUN, request.key, reason="wrong customer")
    resumed = run_child("dup_ids", sqlite_url, RUN, world, "--driver", driver, "--approval")
    assert resumed.outcome["status"] == "completed", resumed.stdout + resumed.stderr
    assert [line["to"] for line in journal(world)] == ["y@example.com"]


@pytest.mark.parametrize("how", ["cancelled", pytest.param("sibling_lease_lost", marks=pytest.mark.slow)])
def test_an_arun_that_ends_while_a_sibling_tool_still_runs_does_not_let_the_next_holder_send_it_again(
    sqlite_url: str, world: Path, how: str
) -> None:
    # arun ends early (a request timeout cancels it, or a sibling tool raised LeaseLost) while a
    # slow send is still running in its thread. The next process must not trust "not executed"
    # as if the run had been released with nothing in flight.
    script, extra = ("three_sends", ["--cancel-after", "0.5"]) if how == "cancelled" else ("fenced_pair", [])
    if how == "sibling_lease_lost":
        (world / "refuse").touch()
    args = [sys.executable, str(CHILD), script, "--store", sqlite_url, "--run-id", RUN, "--world", str(world)]
    args += ["--driver", "async", "--probe", *extra]
    env = {**os.environ, "HOSTILE_SEND_SECONDS": "2.5"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(world.glob("sending-*")):
            assert time.monotonic() < deadline and first.poll() is None, "the slow send never started"
            time.sleep(0.02)
        with open_store(sqlite_url) as store:  # wait until the first process has let go of the run
            while store.lease_of(RUN) is not None and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        (world / "refuse").unlink(missing_ok=True)
        second = run_child(script, sqlite_url, RUN, world, "--driver", "async", "--probe")
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode in (0, 3), second.stderr[-2000:]
    sent = Counter(line["to"] for line in journal(world) if line["tool"] == "send_email")
    assert set(sent.values()) == {1}, f"an email was sent twice: {sent}"


def test_a_timed_out_arun_retried_at_once_in_the_same_process_does_not_send_twice(sqlite_url: str, world: Path) -> None:
    # The request times out while the email is being sent (in a thread that goes on), and the
    # handler retries on the same event loop straight away.
    args = ["--driver", "async", "--probe", "--cancel-after", "0.5", "--retry"]
    env = {**os.environ, "HOSTILE_SEND_SECONDS": "1.5"}
    done = subprocess.run(
        [
            sys.executable,
            str(CHILD),
            "three_sends",
            "--store",
            sqlite_url,
            "--run-id",
            RUN,
            "--world",
            str(world),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr[-2000:]
    sent = Counter(line["to"] for line in journal(world))
    assert set(sent.values()) == {1}, f"an email was sent twice: {sent} ({done.stdout})"
