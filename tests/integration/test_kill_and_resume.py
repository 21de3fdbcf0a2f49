"""A real process is killed with SIGKILL mid-run and a fresh process resumes it exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from unbroken import open_store

CHILD = str(Path(__file__).with_name("core_child.py"))
TURNS = 8


def run_child(url: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("UNBROKEN_CRASH_AT", None)
    if crash_at:
        env["UNBROKEN_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, CHILD, url, "q3-report", str(TURNS)], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@pytest.mark.parametrize(
    "crash_at",
    ["save.model_turn.after:3", "save.tools_done.before:4", "sqlite.before_commit:6", "tool.after_execute:2"],
)
def test_a_killed_run_resumes_where_it_stopped_and_ends_as_if_never_killed(
    tmp_path: Path, kind: str, crash_at: str
) -> None:
    if kind == "file":
        pytest.importorskip("unbroken.stores.files", reason="file store not built yet")
        if crash_at.startswith("sqlite."):
            crash_at = "file.before_rename:6"
        crashed_url, clean_url = f"file://{tmp_path / 'crashed'}", f"file://{tmp_path / 'clean'}"
    else:
        crashed_url, clean_url = f"sqlite:///{tmp_path / 'crashed.db'}", f"sqlite:///{tmp_path / 'clean.db'}"

    killed = run_child(crashed_url, crash_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = open_store(crashed_url).load("q3-report", recover=False)
    assert 0 < before.turns < TURNS + 1

    resumed = run_child(crashed_url)
    assert resumed.returncode == 0, resumed.stderr
    outcome = json.loads(resumed.stdout)
    assert outcome["resumed"] and outcome["status"] == "completed"
    assert outcome["turns"] == TURNS + 1 and outcome["tokens"] == (TURNS + 1) * 125

    assert run_child(clean_url).returncode == 0
    crashed, clean = open_store(crashed_url).load("q3-report"), open_store(clean_url).load("q3-report")
    assert crashed.messages == clean.messages
    assert (crashed.turns, crashed.tokens_used, crashed.usage) == (clean.turns, clean.tokens_used, clean.usage)
