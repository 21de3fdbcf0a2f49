"""``unbroken watch`` follows a live run from another process; ``unbroken history`` shows crashes
and how each call left without a result was settled (issue 11 item 5)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from features_child import SCRIPT, make_agent
from features_crash import CHILD, child

from unbroken import open_store, ops
from unbroken.cli import main
from unbroken.errors import CorruptCheckpoint, RunInterrupted
from unbroken.watching import Update


def test_watch_follows_a_run_live_in_another_process_to_its_end(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    make_agent(url, outbox, SCRIPT).replace(max_turns=1).run("Email a and b", run_id="warm")  # store exists
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    args = ["run", "--store", url, "--run-id", "r1", "--outbox", outbox, "--no-approval", "--slow", "0.6"]
    runner = subprocess.Popen([sys.executable, str(CHILD), *args], env=env, stdout=subprocess.DEVNULL)
    try:
        with open_store(url) as store:
            while not store.exists("r1"):  # the child has started the run
                assert runner.poll() is None
                threading.Event().wait(0.02)
        watcher = subprocess.run(
            [
                sys.executable,
                "-m",
                "unbroken.cli",
                "watch",
                "r1",
                "--store",
                url,
                "--interval",
                "0.1",
                "--timeout",
                "60",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        assert runner.wait(timeout=60) == 0
    assert watcher.returncode == 0, watcher.stderr
    labels = [line.split()[5] for line in watcher.stdout.splitlines() if " save " in line]
    assert labels == ["start", "model_turn", "tool_result", "tools_done", "completed"]  # each once, to the end
    assert "effect send_email (toolu_a): succeeded" in watcher.stdout
    assert "effect send_email (toolu_b): succeeded" in watcher.stdout
    assert watcher.stdout.rstrip().endswith("run r1 is completed")


def stopped_at_once() -> threading.Event:
    stop = threading.Event()
    stop.set()
    return stop


def test_follow_yields_only_what_changed_and_stops_when_the_run_waits_for_a_person(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    agent = make_agent(url, outbox, SCRIPT)
    with pytest.raises(RunInterrupted):
        agent.run("Email a and b", run_id="r1", stop=stopped_at_once())  # saved at its start, then stopped
    with open_store(url) as store:
        ticks: list[Update] = []

        def between_polls(seconds: float) -> None:
            if len(ticks) == 1:
                agent.run(run_id="r1")  # the run moves on while it is watched

        for update in ops.follow(store, "r1", interval=0, timeout=30, sleep=between_polls):
            ticks.append(update)
    assert [info.label for info in ticks[0].saves] == ["start"]
    # The resume records what it found first (one record per resume: issue 21 item 6).
    assert [info.label for info in ticks[1].saves] == ["resumed", "model_turn", "approval_requested"]
    assert ticks[1].phase == "awaiting_approval" and ticks[1].stopped
    assert len(ticks) == 2


def test_history_shows_each_crash_and_how_each_dangling_call_was_settled(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    args = ["run", "--store", url, "--run-id", "r1", "--outbox", outbox, "--no-approval"]
    child(*args, crash_at="tool.after_execute:1")  # a sent, its result lost; b not started
    assert child(*args) == {"status": "completed", "turns": 2}
    with open_store(url) as store:
        notes = ops.settlements(store, "r1")
    # As the engine recorded them in the saves that settled them (issue 21 item 6).
    assert list(notes.values()) == [
        ["resumed after save 2: the previous process ended while settling tool calls: 2 of 2 call(s) had no result"],
        [
            "call toolu_a (send_email): it was started before and its outcome never recorded; the probe found "
            "that it took effect; not run again: the probe's result is its result"
        ],
        ["call toolu_b (send_email): it had not started: run now (attempt 1)"],
    ]
    shown = CliRunner().invoke(main, ["history", "r1", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "what each resume found, and how calls were settled" in shown.output
    assert "toolu_a (send_email): it was started before and its outcome never recorded" in shown.output
    assert "resumed 1 time(s) up to save point" in shown.output


def test_history_of_a_run_that_never_crashed_has_no_notes(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    make_agent(url, outbox, SCRIPT, approval=False).run("Email a and b", run_id="r1")
    with open_store(url) as store:
        assert ops.settlements(store, "r1") == {}


def test_follow_never_shows_a_record_that_fails_its_checksum(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    agent = make_agent(url, outbox, SCRIPT)
    with pytest.raises(RunInterrupted):
        agent.run("Email a and b", run_id="r1", stop=stopped_at_once())
    with open_store(url) as store:
        ticks: list[Update] = []

        def between_polls(seconds: float) -> None:
            if len(ticks) == 1:
                agent.run(run_id="r1")  # the run moves on while it is watched ...
                with sqlite3.connect(tmp_path / "runs.db") as conn:  # ... and its newest record is damaged
                    conn.execute("UPDATE unbroken_records SET checksum = '00000000' WHERE seq = 2")

        with pytest.raises(CorruptCheckpoint, match="only a whole read can judge"):
            for update in ops.follow(store, "r1", interval=0, timeout=30, sleep=between_polls):
                ticks.append(update)
    assert len(ticks) == 1
