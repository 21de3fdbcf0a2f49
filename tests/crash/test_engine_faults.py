"""Faults beyond one clean SIGKILL, with real processes, under both drivers (issue 9.4-9.6): a
provider that reuses call ids, a tool that kills its own process every time, and a kill
while an ``arun`` sibling is half-way through changing ``business_state``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from crash_checks import is_unknown, run_child, tool_results
from crash_service import CountingService

from unbroken import open_store

MAX_RESUMES = 8


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """These faults are the engine's, the same on every store (the window sweep covers stores)."""
    return f"sqlite:///{tmp_path / 'runs.db'}"


def agent_args(script: str, store_url: str, run_id: str, service: CountingService, driver: str) -> list[str]:
    args = ["agent", "--script", script, "--store", store_url, "--run-id", run_id]
    return [*args, "--service", str(service.path), "--driver", driver]


def test_a_provider_that_reuses_call_ids_gets_every_call_run_once_with_its_own_result(
    store_url: str, run_id: str, service: CountingService, driver: str
) -> None:
    args = [*agent_args("reused_ids", store_url, run_id, service, driver), "--probe"]
    # Killed after the first of two calls named call_0 in one turn was sent, before it was saved.
    crashed = run_child(args, crash_at="tool.after_execute:4")
    assert crashed.killed, crashed.stderr
    resumed = run_child(args)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.outcome["status"] == "completed"

    sent = Counter(row["body"] for row in service.rows() if row["endpoint"] == "send")
    assert sent == {
        "a@example.com:Hello": 2,
        "b@example.com:Other": 1,
        "c@example.com:Twin 1": 1,
        "d@example.com:Twin 2": 1,
    }
    with open_store(store_url) as store:
        state = store.load(run_id)
        entries = sorted(store.ledger_list(run_id), key=lambda entry: entry.created_at)
    assert len({entry.key for entry in entries}) == 5
    truths = [service.find_sent(entry.key) for entry in entries]
    assert [entry.result.content if entry.result else None for entry in entries] == truths
    # Every tool_result, in history order, carries its own call's result (all are "call_0").
    answered = [block["content"] for block in tool_results(state.messages)["call_0"]]
    assert answered == truths


def test_a_read_only_tool_that_kills_its_process_runs_at_most_three_times(
    store_url: str, run_id: str, service: CountingService, driver: str
) -> None:
    args = agent_args("crash_loop_read", store_url, run_id, service, driver)
    children = [run_child(args)]
    while children[-1].returncode != 0 and len(children) < MAX_RESUMES:
        assert children[-1].returncode == 137, children[-1].stderr
        children.append(run_child(args))
    assert children[-1].returncode == 0, children[-1].stderr
    assert service.requests("read")[None] == 3, "the tool ran once, then twice more on resume, then never"
    with open_store(store_url) as store:
        (answer,) = tool_results(store.load(run_id).messages)["toolu_die"]
    assert answer["is_error"] is True
    assert answer["content"].startswith("NOT RUN AGAIN") and "started again after 2 crash(es)" in answer["content"]


def test_a_side_effect_that_kills_its_process_stops_being_retried_and_its_probe_settles_it(
    store_url: str, run_id: str, service: CountingService, driver: str
) -> None:
    args = agent_args("crash_loop_send", store_url, run_id, service, driver)
    children = [run_child(args)]
    while children[-1].returncode != 0 and len(children) < MAX_RESUMES:
        children.append(run_child(args))
    assert children[-1].returncode == 0, children[-1].stderr
    assert len(children) == 4
    assert service.requests("read")[None] == 3
    with open_store(store_url) as store:
        (answer,) = tool_results(store.load(run_id).messages)["toolu_die"]
        (entry,) = store.ledger_list(run_id)
    # Past the cap the probe is still asked; it truthfully says the tool never sent: a known
    # outcome (not done), told to the model as such, and the call is not run a fourth time.
    assert not is_unknown(answer) and answer.get("is_error") is True, answer
    assert answer["content"].startswith("NOT DONE: the call to die_sending"), answer
    assert "3 attempts to run it were recorded" in answer["content"]
    assert (entry.status, entry.attempts) == ("failed", 3)


def test_a_calls_change_to_business_state_is_saved_with_its_result_never_by_a_sibling(
    store_url: str, run_id: str, service: CountingService, driver: str
) -> None:
    args = agent_args("slow_sibling", store_url, run_id, service, driver)
    # Killed right after the first result of the turn was saved: under arun that is the fast
    # call's, while the slow one has changed its copy of the state and is still running.
    crashed = run_child(args, crash_at="tool.after_outcome:1")
    assert crashed.killed, crashed.stderr
    with open_store(store_url) as store:
        saved = store.load(run_id).business_state
    assert saved == ({"fast": 1} if driver == "async" else {"slow": 1})
    resumed = run_child(args)
    assert resumed.returncode == 0, resumed.stderr
    with open_store(store_url) as store:
        assert store.load(run_id).business_state == {"slow": 1, "fast": 1}
