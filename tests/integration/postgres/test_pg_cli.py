"""``unbroken submit`` and ``unbroken worker`` from the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from unbroken.stores.postgres import PostgresStore

AGENT_MODULE = """
from unbroken import Agent, ScriptedModel, open_store

def build():
    script = [{"content": [{"type": "text", "text": "triaged"}], "stop_reason": "end_turn", "usage": {}}]
    return Agent(ScriptedModel(script), [], open_store("memory://"))
"""


def unbroken(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from unbroken.cli import main; main()", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_submitted_runs_are_run_by_a_worker_started_from_the_command_line(
    pg_url: str, pg_store: PostgresStore, tmp_path: Path
) -> None:
    (tmp_path / "myagents.py").write_text(AGENT_MODULE)
    submitted = [
        unbroken("submit", "--store", pg_url, "--agent", "myagents:build", "--task", f"ticket {i}", cwd=tmp_path)
        for i in range(3)
    ]
    assert all(done.returncode == 0 for done in submitted), [done.stderr for done in submitted]
    run_ids = [done.stdout.strip() for done in submitted]
    other = unbroken("submit", "--store", pg_url, "--agent", "other:agent", "--task", "not mine", cwd=tmp_path)
    worker = unbroken("worker", "--store", pg_url, "--agent", "myagents:build", "--until-idle", cwd=tmp_path)
    assert worker.returncode == 0, worker.stderr
    assert sorted(line.split("\t")[0] for line in worker.stdout.splitlines()) == sorted(run_ids)
    assert {pg_store.load(run_id).output for run_id in run_ids} == {"triaged"}
    assert not pg_store.exists(other.stdout.strip())  # submitted for another agent: left alone


def test_a_cli_worker_exits_cleanly_on_sigterm(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "myagents.py").write_text(AGENT_MODULE)
    command = [sys.executable, "-c", "from unbroken.cli import main; main()"]
    args = ["worker", "--store", pg_url, "--agent", "myagents:build", "--poll-interval", "0.1"]
    with subprocess.Popen([*command, *args], cwd=tmp_path, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        assert "SIGTERM to stop" in proc.stderr.readline()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert "0 finished" in proc.stderr.read()


def test_submit_with_a_malformed_agent_spec_says_what_it_should_look_like(pg_url: str, tmp_path: Path) -> None:
    done = unbroken("submit", "--store", pg_url, "--agent", "no-colon", "--task", "t", cwd=tmp_path)
    assert done.returncode == 2 and "module:attr" in done.stderr
