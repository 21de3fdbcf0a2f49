"""``unbroken watch --wait`` started before the run: it waits for the run to start, prints every
event in the order it happened, and names the tools each turn called."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner
from features_child import SCRIPT, make_agent
from features_crash import CHILD

from unbroken.cli import main


def test_watch_wait_follows_a_run_started_after_it_with_its_events_in_order(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", str(tmp_path / "outbox.jsonl")
    make_agent(url, outbox, SCRIPT).replace(max_turns=1).run("Email a and b", run_id="warm")  # store exists
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    command = [sys.executable, "-m", "unbroken.cli", "watch", "r1", "--store", url, "--interval", "0.1"]
    watcher = subprocess.Popen([*command, "--wait", "60"], env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # the watcher is waiting: the run does not exist yet
    assert watcher.poll() is None
    args = ["run", "--store", url, "--run-id", "r1", "--outbox", outbox, "--no-approval", "--slow", "0.6"]
    runner = subprocess.run([sys.executable, str(CHILD), *args], env=env, stdout=subprocess.DEVNULL, timeout=90)
    assert runner.returncode == 0
    out, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0
    lines = out.splitlines()
    labels = [line.split()[5] if " save " in line else line.strip() for line in lines]
    # each save once; each call's intent after the turn that asked for it, its result before the save holding it
    assert labels == [
        "start",
        "model_turn",
        "effect send_email (toolu_a): pending",
        "effect send_email (toolu_a): succeeded",
        "tool_result",
        "effect send_email (toolu_b): pending",
        "effect send_email (toolu_b): succeeded",
        "tools_done",
        "completed",
        "run r1 is completed",
    ], out
    turn = next(line for line in lines if " model_turn " in line)
    assert turn.endswith("calls send_email, send_email")


def test_watch_wait_gives_up_after_its_timeout_naming_the_wait(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    make_agent(url, str(tmp_path / "outbox.jsonl"), SCRIPT).replace(max_turns=1).run("Email a", run_id="warm")
    result = CliRunner().invoke(main, ["watch", "nope", "--store", url, "--wait", "0.3", "--interval", "0.1"])
    assert result.exit_code == 2
    assert "no run 'nope'" in result.output and "after waiting 0.3s" in result.output
