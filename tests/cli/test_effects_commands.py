"""`unbroken effects / resolve / gc`: the effect ledger from the command line."""

from __future__ import annotations

import time
from dataclasses import replace

import cli_agents
import pytest
from cli_helpers import Invoke, Place, run_child_until_killed

from unbroken import open_store
from unbroken.cli.effects import parse_duration

DAY = 86400.0


def test_effects_lists_the_ledger_of_a_run(seeded: Place, invoke: Invoke) -> None:
    result = invoke("effects", "done-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        (entry,) = store.ledger_list("done-run")
    row = next(line for line in result.stdout.splitlines() if entry.key in line)
    assert "send_notice" in row and "succeeded" in row and " 1 " in row


def _pause_on_unknown_outcome(place: Place, invoke: Invoke, crash_at: str) -> None:
    run_child_until_killed(place, crash_at)
    paused = invoke("resume", cli_agents.RUN_ID, "--agent", "cli_agents:make_agent")
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.stdout and cli_agents.CALL_ID in paused.stdout


def test_resolve_not_executed_then_resume_executes_the_call_once(place: Place, invoke: Invoke) -> None:
    _pause_on_unknown_outcome(place, invoke, "ledger.after_intent:1")  # intent saved, never sent
    assert cli_agents.sends(place.outbox) == []
    settled = invoke("resolve", cli_agents.RUN_ID, cli_agents.CALL_ID, "--not-executed", "--store", place.url)
    assert settled.exit_code == 0, settled.output
    resumed = invoke("resume", cli_agents.RUN_ID, "--agent", "cli_agents:make_agent")
    assert resumed.exit_code == 0, resumed.output
    assert len(cli_agents.sends(place.outbox)) == 1
    with open_store(place.url) as store:
        assert store.load(cli_agents.RUN_ID).phase == "completed"


def test_resolve_result_then_resume_tells_the_model_without_executing(place: Place, invoke: Invoke) -> None:
    _pause_on_unknown_outcome(place, invoke, "tool.after_execute:1")  # sent, outcome never saved
    assert len(cli_agents.sends(place.outbox)) == 1
    settled = invoke(
        "resolve", cli_agents.RUN_ID, cli_agents.CALL_ID, "--result", "checked: Ann got it", "--store", place.url
    )
    assert settled.exit_code == 0, settled.output
    resumed = invoke("resume", cli_agents.RUN_ID, "--agent", "cli_agents:make_agent")
    assert resumed.exit_code == 0, resumed.output
    assert len(cli_agents.sends(place.outbox)) == 1
    with open_store(place.url) as store:
        state = store.load(cli_agents.RUN_ID)
    answer = next(m for m in state.messages if m["role"] == "user" and isinstance(m["content"], list))
    assert answer["content"][0]["content"] == "checked: Ann got it"


def _age_ledger(url: str, run_id: str, age: float) -> None:
    with open_store(url) as store:
        for entry in store.ledger_list(run_id):
            store.ledger_put(replace(entry, updated_at=time.time() - age))


def test_gc_prunes_old_entries_of_finished_runs_and_never_a_live_runs(seeded: Place, invoke: Invoke) -> None:
    _age_ledger(seeded.url, "done-run", 10 * DAY)
    _age_ledger(seeded.url, "open-run", 10 * DAY)  # still in progress: must survive
    result = invoke("gc", "--older-than", "7d", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "pruned 1 ledger entry" in result.stdout
    with open_store(seeded.url) as store:
        assert store.ledger_list("done-run") == []
        assert len(store.ledger_list("open-run")) == 1


def test_gc_keeps_entries_of_finished_runs_younger_than_the_cutoff(seeded: Place, invoke: Invoke) -> None:
    _age_ledger(seeded.url, "done-run", 2 * DAY)
    result = invoke("gc", "--older-than", "7d", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "pruned 0 ledger entries" in result.stdout
    with open_store(seeded.url) as store:
        assert len(store.ledger_list("done-run")) == 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45.0), ("30m", 1800.0), ("12h", 43200.0), ("7d", 7 * DAY), ("2w", 14 * DAY), ("1.5h", 5400.0)],
)
def test_durations_are_read_with_their_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_effects_after_gc_says_the_finished_runs_entries_were_collected(seeded: Place, invoke: Invoke) -> None:
    _age_ledger(seeded.url, "done-run", 10 * DAY)
    assert invoke("gc", "--older-than", "7d", "--store", seeded.url).exit_code == 0
    result = invoke("effects", "done-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    # the hint is a command that runs as printed (tests/cli/test_hints.py)
    assert f"`unbroken gc --older-than 7d --store {seeded.url}` collects the entries of finished runs" in result.stdout
    assert "yet" not in result.stdout
