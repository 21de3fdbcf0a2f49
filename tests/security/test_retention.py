"""Retention: finished runs past the policy lose their history (their ledger kept for audit as
long as asked), live and recent runs are never touched, a call does a bounded amount of work,
and a crash in the middle leaves every run intact, emptied or gone, never half changed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from unbroken import Agent, ModelCallFailed, ScriptedModel, Store, open_store, ops, tool
from unbroken.worker import Worker

HERE = Path(__file__).resolve().parent
MARKER = "customer-record-4242"


def finished_run(store: Store, run_id: str) -> None:
    @tool(effect="side_effect")
    def send(to: str) -> str:
        """Send."""
        return f"sent to {to}"

    script: list[dict[str, Any]] = [
        {
            "content": [{"type": "tool_use", "id": "t1", "name": "send", "input": {"to": MARKER}}],
            "stop_reason": "tool_use",
            "usage": {},
        },
        {"content": [{"type": "text", "text": f"told {MARKER}"}], "stop_reason": "end_turn", "usage": {}},
    ]
    Agent(ScriptedModel(script), tools=[send], store=store).run(f"tell {MARKER}", run_id=run_id)


def live_run(store: Store, run_id: str) -> None:
    with pytest.raises(ModelCallFailed):
        Agent(ScriptedModel([]), store=store).run("still going", run_id=run_id)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        for n in range(5):
            finished_run(store, f"done-{n}")
        live_run(store, "live")
    return url


def later(days: float) -> float:
    return time.time() + days * ops.DAY


def test_finished_runs_past_the_policy_are_removed_and_live_ones_kept(url: str) -> None:
    with open_store(url) as store:
        assert ops.apply_retention(store, ops.Retention(runs_days=30), now=later(10)).removed == []
        report = ops.apply_retention(store, ops.Retention(runs_days=30), now=later(40))
        assert sorted(report.removed) == [f"done-{n}" for n in range(5)] and not report.more
        assert store.exists("live") and store.load("live").phase == "awaiting_model"
        for n in range(5):
            assert not store.exists(f"done-{n}") and store.ledger_list(f"done-{n}") == []


def test_the_ledger_is_kept_for_audit_after_the_history_goes(url: str) -> None:
    policy = ops.Retention(runs_days=30, ledger_days=365)
    with open_store(url) as store:
        report = ops.apply_retention(store, policy, now=later(40))
        assert len(report.emptied) == 5 and report.removed == []
        state = store.load("done-0")
        assert MARKER not in str(state.messages) + state.task + str(state.output)
        assert [entry.tool for entry in store.ledger_list("done-0")] == ["send"]  # the audit record
        listed = {row.run_id: row.phase for row in store.list_runs()}
        assert listed["done-0"] == "retained" and listed["live"] == "awaiting_model"
        assert ops.apply_retention(store, policy, now=later(100)).emptied == []  # nothing to redo
        gone = ops.apply_retention(store, policy, now=later(400))
        assert sorted(gone.removed) == [f"done-{n}" for n in range(5)]
        assert store.exists("live")


def test_a_call_does_at_most_limit_runs(url: str) -> None:
    with open_store(url) as store:
        first = ops.apply_retention(store, ops.Retention(runs_days=30), limit=2, now=later(40))
        assert len(first.removed) == 2 and first.more
        second = ops.apply_retention(store, ops.Retention(runs_days=30), limit=2, now=later(40))
        third = ops.apply_retention(store, ops.Retention(runs_days=30), limit=2, now=later(40))
        assert len(second.removed) == 2 and len(third.removed) == 1 and not third.more


@pytest.mark.parametrize(
    ("point", "ledger_days"), [("retention.before_remove:3", "-"), ("retention.before_empty:3", "365")]
)
def test_a_crash_in_the_middle_leaves_every_run_whole_and_the_next_call_finishes(
    url: str, point: str, ledger_days: str
) -> None:
    env = dict(os.environ, UNBROKEN_CRASH_AT=point)
    child = [sys.executable, str(HERE / "retention_child.py"), url, "40", ledger_days]
    killed = subprocess.run(child, env=env, capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    with open_store(url) as store:
        listed = {row.run_id: row.phase for row in store.list_runs()}
        done = [run for run in listed if run.startswith("done-")]
        changed = 5 - len(done) if ledger_days == "-" else sum(phase == "retained" for phase in listed.values())
        assert changed == 2  # two runs went through, the third was not touched
        for run_id in done:
            state = store.load(run_id)  # every run left loads: intact or emptied, never half written
            assert state.phase == "completed"
    finished = subprocess.run(child, capture_output=True, timeout=60)
    assert finished.returncode == 0, finished.stderr.decode()
    with open_store(url) as store:
        phases = {row.run_id: row.phase for row in store.list_runs()}
        if ledger_days == "-":
            assert set(phases) == {"live"}
        else:
            assert phases == {**{f"done-{n}": "retained" for n in range(5)}, "live": "awaiting_model"}


def test_an_idle_worker_applies_the_policy(url: str) -> None:
    with open_store(url) as store:
        worker = Worker(
            lambda given: Agent(ScriptedModel([]), store=given), store, retention=ops.Retention(runs_days=0)
        )
        worker.run(until_idle=True)
        assert {row.run_id for row in store.list_runs()} == {"live"}
