"""Google ADK with ``UnbrokenSessionService`` and ``UnbrokenToolPlugin``, real processes, the
real package: killed right after a payment and resumed, each payment happens once; ADK alone
(no plugin) pays again, which is what the plugin is for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("google_adk_child.py")


def run_child(
    url: str, journal: Path, mode: str, kill_after: int | None = None, resumable: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("KILL_AFTER_PAYMENT", None)
    if kill_after is not None:
        env["KILL_AFTER_PAYMENT"] = str(kill_after)
    app = "resumable" if resumable else "not-resumable"
    command = [sys.executable, str(CHILD), url, str(journal), "invoices", mode, app]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def payments(journal: Path) -> list[int]:
    return [json.loads(line)["amount"] for line in journal.read_text().splitlines()] if journal.exists() else []


def report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


@pytest.mark.slow
def test_two_payments_with_a_reused_call_id_are_two_payments(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    done = report(run_child(f"sqlite:///{tmp_path / 'runs.db'}", journal, "probe"))
    assert done == {"final": "done", "resumed": False, "responses": [{"charged": 5}, {"charged": 7}]}
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()]
    assert payments(journal) == [5, 7] and keys[0] != keys[1]  # both were call_0: keyed by occurrence
    again = report(run_child(f"sqlite:///{tmp_path / 'runs.db'}", journal, "probe"))  # finished: not run again
    assert again["resumed"] is False and payments(journal) == [5, 7]


@pytest.mark.parametrize(
    ("kill_after", "resumable"),
    [(1, False), pytest.param(1, True, marks=pytest.mark.slow), pytest.param(2, False, marks=pytest.mark.slow)],
)
def test_killed_inside_a_payment_and_resumed_each_payment_happens_once(
    tmp_path: Path, kill_after: int, resumable: bool
) -> None:
    # Not resumable: the user's next message resumes; ADK drops the unanswered call and asks the
    # model again: the plugin answers the call first (before_run_callback). Resumable: ADK runs
    # the interrupted call again: the ledger answers it (before_tool_callback).
    journal, url = tmp_path / "journal.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"
    killed = run_child(url, journal, "probe", kill_after=kill_after, resumable=resumable)
    assert killed.returncode == -signal.SIGKILL
    resumed = report(run_child(url, journal, "probe", resumable=resumable))
    # The probe found the payment made before the kill; its result answers the interrupted call.
    assert resumed == {"final": "done", "resumed": True, "responses": [{"charged": 5}, {"charged": 7}]}
    assert payments(journal) == [5, 7]


def test_without_a_probe_the_interrupted_payment_is_an_unknown_outcome_never_a_second_payment(tmp_path: Path) -> None:
    journal, url = tmp_path / "journal.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"
    assert run_child(url, journal, "no-probe", kill_after=1).returncode == -signal.SIGKILL
    resumed = report(run_child(url, journal, "no-probe"))
    assert payments(journal) == [5, 7]
    first, second = resumed["responses"]
    assert first["error"].startswith("UNKNOWN OUTCOME") and second == {"charged": 7}


@pytest.mark.slow
@pytest.mark.parametrize("resumable", [True, False])
def test_adk_alone_pays_twice_after_the_same_kill(tmp_path: Path, resumable: bool) -> None:
    # What the plugin prevents, measured on the same agent and store. Resumable: ADK runs the
    # interrupted call again. Not resumable: it drops the call that has no response ("Dropping
    # function calls with no matching function response") and the model makes it again.
    journal, url = tmp_path / "journal.jsonl", f"sqlite:///{tmp_path / 'runs.db'}"
    assert run_child(url, journal, "adk", kill_after=1, resumable=resumable).returncode == -signal.SIGKILL
    resumed = run_child(url, journal, "adk", resumable=resumable)
    assert report(resumed)["final"] == "done"
    assert payments(journal) == [5, 5, 7]
