"""Pydantic AI through ``run_durably`` with real processes: killed inside a side effect and
resumed, each payment happens once and the run goes on; a provider that reuses ``call_0`` gets
two payments, each answered with its own result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from unbroken import open_store

CHILD = Path(__file__).with_name("pydantic_child.py")


def run_child(url: str, journal: Path, probe: bool, kill_after: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("KILL_AFTER_PAYMENT", None)
    if kill_after is not None:
        env["KILL_AFTER_PAYMENT"] = str(kill_after)
    command = [sys.executable, str(CHILD), url, str(journal), "invoices", "probe" if probe else "no-probe"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def payments(journal: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []


def test_two_payments_with_a_reused_call_id_are_two_payments(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    done = run_child(f"sqlite:///{tmp_path / 'runs.db'}", journal, probe=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"output": "done", "resumed": False}
    made = payments(journal)
    assert [payment["amount"] for payment in made] == [5, 7]
    assert made[0]["key"] != made[1]["key"]  # both calls were call_0: keyed by occurrence


@pytest.mark.parametrize("kill_after", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_killed_inside_a_payment_and_resumed_each_payment_happens_once(tmp_path: Path, kill_after: int) -> None:
    journal, url = tmp_path / "journal.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"
    killed = run_child(url, journal, probe=True, kill_after=kill_after)
    assert killed.returncode == -signal.SIGKILL
    resumed = run_child(url, journal, probe=True)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"output": "done", "resumed": True}
    assert [payment["amount"] for payment in payments(journal)] == [5, 7]  # the probe found the one made
    again = run_child(url, journal, probe=True)  # a finished run is returned, not run again
    assert json.loads(again.stdout) == {"output": "done", "resumed": False}
    assert len(payments(journal)) == 2


def test_without_a_probe_the_interrupted_payment_is_an_unknown_outcome_never_a_second_payment(tmp_path: Path) -> None:
    journal, url = tmp_path / "journal.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"
    assert run_child(url, journal, probe=False, kill_after=1).returncode == -signal.SIGKILL
    resumed = run_child(url, journal, probe=False)
    assert resumed.returncode == 0, resumed.stderr
    assert [payment["amount"] for payment in payments(journal)] == [5, 7]
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolReturnPart

    from unbroken.integrations._runlog import log_id
    from unbroken.integrations.pydantic_ai import LOG_PREFIX

    state = open_store(url).load(log_id(LOG_PREFIX, "invoices"))
    messages = ModelMessagesTypeAdapter.validate_python(state.messages)
    returns = [str(part.content) for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    assert returns[0].startswith("UNKNOWN OUTCOME") and returns[1] == "charged 7"
