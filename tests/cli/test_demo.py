"""`unbroken demo`: crash the scenario with SIGKILL in a child process, resume it, check it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Invoke

from unbroken import open_store
from unbroken.cli.demo import crash_resume
from unbroken.cli.demo.scenario import OUTBOX_DIR, RUN_ID, STORE_FILE, outbox_emails
from unbroken.cli.demo.script import build_script, crash_spec, expected_totals, turn_of_call


def test_demo_survives_the_kill_with_one_email_and_turns_carried_over(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    command = Path(sys.executable).with_name("unbroken")
    completed = subprocess.run(
        [str(command), "demo", "--workdir", str(workdir)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "killed by SIGKILL" in completed.stdout
    assert "Traceback" not in completed.stderr
    assert len(list((workdir / OUTBOX_DIR).glob("*.json"))) == 1
    script = build_script()
    turns, tokens = expected_totals(script)
    crash_turn = turn_of_call(script, "email_team")
    with open_store(f"sqlite:///{workdir / STORE_FILE}") as store:
        state = store.load(RUN_ID)
        timeline = store.history(RUN_ID)
        (email,) = [entry for entry in store.ledger_list(RUN_ID) if entry.tool == "email_team"]
    assert (state.phase, state.turns, state.tokens_used) == ("completed", turns, tokens)
    assert [info.label for info in timeline].count("start") == 1
    assert [info.turns for info in timeline] == sorted(info.turns for info in timeline)
    assert any(info.turns == crash_turn for info in timeline)
    assert (email.status, email.attempts) == ("succeeded", 1)


def test_demo_exits_non_zero_when_one_of_its_checks_fails(
    tmp_path: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    def every_email_twice(workdir: Path) -> list[dict[str, Any]]:
        return outbox_emails(workdir) * 2

    monkeypatch.setattr(crash_resume, "outbox_emails", every_email_twice)
    result = invoke("demo", "--workdir", str(tmp_path / "demo"))
    assert result.exit_code == 1
    assert "FAIL  exactly one email in the outbox" in result.stdout


def test_demo_refuses_a_work_dir_that_is_not_empty(tmp_path: Path, invoke: Invoke) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = invoke("demo", "--workdir", str(tmp_path))
    assert result.exit_code == 2
    assert "is not empty" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


def test_demo_script_is_deterministic_and_kills_right_after_the_email() -> None:
    script = build_script()
    assert json.dumps(script) == json.dumps(build_script())
    calls = [b for response in script for b in response["content"] if b["type"] == "tool_use"]
    count = int(crash_spec(script).rpartition(":")[2])
    assert calls[count - 1]["name"] == "email_team"
    assert sum(1 for c in calls if c["name"] == "email_team") == 1
    assert 25 <= len(script) <= 35
    assert any(b["type"] == "thinking" and b["signature"] for response in script for b in response["content"])
