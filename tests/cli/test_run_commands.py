"""`unbroken runs / show / history / export / resume` on a seeded SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cli_agents
import pytest
from cli_helpers import Invoke, Place, run_child_until_killed

from unbroken import open_store
from unbroken.leases import make_owner


def test_runs_lists_every_run_with_its_phase_turns_and_tokens(seeded: Place, invoke: Invoke) -> None:
    result = invoke("runs", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if "-run " in line}
    assert set(lines) == {"done-run", "open-run"}
    assert "completed" in lines["done-run"] and " 2 " in lines["done-run"] and "2,000" in lines["done-run"]
    assert "awaiting_model" in lines["open-run"] and " 1 " in lines["open-run"] and "1,000" in lines["open-run"]


def test_show_prints_the_summary_last_messages_and_business_state(seeded: Place, invoke: Invoke) -> None:
    result = invoke("show", "done-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert cli_agents.TASK in out
    assert "completed" in out
    assert "call send_notice(" in out and "(thinking: " in out  # the one rendering of every provider format
    assert '"tier": "gold"' in out


def test_show_lists_the_pending_call_of_an_interrupted_run(place: Place, invoke: Invoke) -> None:
    run_child_until_killed(place, "ledger.after_intent:1")
    result = invoke("show", cli_agents.RUN_ID, "--store", place.url)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if cli_agents.CALL_ID in line and "send_notice" in line)
    assert "none yet" in row and "pending" in row


def test_history_lists_every_save_point_in_order(seeded: Place, invoke: Invoke) -> None:
    result = invoke("history", "done-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        expected = store.history("done-run")
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("│")]
    assert [(int(r[1]), r[3]) for r in rows] == [(info.seq, info.label) for info in expected]
    assert expected[0].label == "start"


def test_export_prints_the_full_state_as_json(seeded: Place, invoke: Invoke) -> None:
    result = invoke("export", "done-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    with open_store(seeded.url) as store:
        state = store.load("done-run")
        ledger = store.ledger_list("done-run")
    assert document["state"]["messages"] == state.messages
    assert document["state"]["business_state"] == {"customer": "ann", "tier": "gold"}
    assert document["state"]["turns"] == 2
    assert [entry["key"] for entry in document["effect_ledger"]] == [entry.key for entry in ledger]
    assert len(document["save_points"]) == state.save_seq


def test_export_out_writes_the_json_to_a_file(seeded: Place, invoke: Invoke, tmp_path: Path) -> None:
    out = tmp_path / "done.json"
    result = invoke("export", "done-run", "--out", str(out), "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert json.loads(out.read_text())["state"]["run_id"] == "done-run"


def test_resume_with_a_factory_continues_the_run_from_its_checkpoint(seeded: Place, invoke: Invoke) -> None:
    result = invoke("resume", "open-run", "--agent", "cli_agents:make_agent")
    assert result.exit_code == 0, result.output
    assert "completed" in result.stdout and "Ann has been told." in result.stdout
    with open_store(seeded.url) as store:
        state = store.load("open-run")
    # One turn before the failure plus one now: turns and tokens continue, never restart.
    assert (state.phase, state.turns, state.tokens_used) == ("completed", 2, 2 * cli_agents.TOKENS_PER_TURN)
    assert len(cli_agents.sends(seeded.outbox)) == 2  # done-run's and open-run's, none repeated


def test_resume_accepts_a_module_level_agent(
    seeded: Place, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agent_instance_module.py").write_text("from cli_agents import make_agent\n\nagent = make_agent()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "agent_instance_module", raising=False)
    result = invoke("resume", "open-run", "--agent", "agent_instance_module:agent")
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        assert store.load("open-run").phase == "completed"


def test_resume_of_a_finished_run_returns_its_result_without_the_model(seeded: Place, invoke: Invoke) -> None:
    result = invoke("resume", "done-run", "--agent", "cli_agents:make_agent", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "already finished; model not called" in result.stdout
    with open_store(seeded.url) as store:
        assert store.load("done-run").turns == 2


def test_show_says_when_the_lease_holder_is_a_dead_process(seeded: Place, invoke: Invoke) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "from unbroken.leases import make_owner; print(make_owner())"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    dead_owner = child.stdout.strip()
    with open_store(seeded.url) as store:
        store.acquire_lease("open-run", dead_owner, 300.0)
    result = invoke("show", "open-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "whose process is dead: the next resume takes it over at once" in " ".join(result.stdout.split())


def test_show_does_not_call_a_live_lease_holder_dead(seeded: Place, invoke: Invoke) -> None:
    with open_store(seeded.url) as store:
        store.acquire_lease("open-run", make_owner(), 300.0)
    result = invoke("show", "open-run", "--store", seeded.url)
    assert result.exit_code == 0, result.output
    assert "held by" in result.stdout and "dead" not in result.stdout
