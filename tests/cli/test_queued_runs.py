"""A run submitted for workers and not started yet is shown as queued, not as "no run"."""

from __future__ import annotations

import cli_agents
from cli_helpers import Invoke, Place

from unbroken import open_store
from unbroken.ops import inspect_run, list_all_runs, queued_runs


def submit(place: Place, run_id: str = "waiting") -> None:
    with open_store(place.url) as store:
        store.submit(cli_agents.TASK, run_id, agent="cli_agents:make_agent")


def test_runs_lists_a_queued_run_as_queued(seeded: Place, invoke: Invoke) -> None:
    submit(seeded)
    result = invoke("runs", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "│ waiting " in line)
    assert "queued" in row
    assert "done-run" in result.stdout and "open-run" in result.stdout


def test_show_describes_a_queued_run_instead_of_saying_no_run(seeded: Place, invoke: Invoke) -> None:
    submit(seeded)
    result = invoke("show", "waiting", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "queued (submitted, not started by a worker yet" in text
    assert cli_agents.TASK in text and "cli_agents:make_agent" in text


def test_history_of_a_queued_run_says_it_has_no_save_point(seeded: Place, invoke: Invoke) -> None:
    submit(seeded)
    result = invoke("history", "waiting", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "is queued" in result.stdout


def test_a_started_run_is_no_longer_queued(seeded: Place) -> None:
    submit(seeded)
    with open_store(seeded.url) as store:
        assert [run.run_id for run in queued_runs(store)] == ["waiting"]
        cli_agents.build_agent(store, seeded.outbox).run(cli_agents.TASK, run_id="waiting")
        assert queued_runs(store) == []
        assert inspect_run(store, "waiting").state is not None
        assert [run.run_id for run in list_all_runs(store)].count("waiting") == 1


def test_resume_of_a_queued_run_says_a_worker_starts_it(seeded: Place, invoke: Invoke) -> None:
    submit(seeded)
    result = invoke("resume", "waiting", "--agent", "cli_agents:make_agent", "--store", seeded.url)
    assert result.exit_code == 2
    assert "is queued (submitted, not started yet)" in result.stderr and "unbroken worker" in result.stderr
