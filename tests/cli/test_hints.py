"""Every command a hint prints runs as printed against a real SQLite store (the agent and the
free-text placeholders filled in); a run id one typo away gets a "did you mean"; a SQLite URL
with three slashes that meant an absolute path gets the four-slash form; a task that is not a
string is refused before anything is written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import cli_agents
import hint_agents
import pytest
from cli_helpers import Invoke, Place, run_child_until_killed
from click.testing import Result

from unbroken import InvalidTask, open_store

HINT = re.compile(r"`(unbroken [^`]+)`")
FILLED = {"module:attr": "cli_agents:make_agent", "TEXT": "checked by hand"}


def hints(result: Result) -> list[str]:
    return HINT.findall(result.output)


def run_hint(invoke: Invoke, hint: str, agent: str = "cli_agents:make_agent") -> Result:
    words = [{**FILLED, "module:attr": agent}.get(word, word) for word in shlex.split(hint)]
    assert words[0] == "unbroken"
    result = invoke(*words[1:])
    assert result.exit_code == 0, (hint, result.output)
    return result


def test_the_hints_of_a_paused_run_resolve_it_and_resume_it(place: Place, invoke: Invoke) -> None:
    run_child_until_killed(place, "tool.after_execute:1")
    paused = invoke("resume", cli_agents.RUN_ID, "--agent", "cli_agents:make_agent", "--store", place.url)
    assert paused.exit_code == 0, paused.output
    (resolve,) = hints(paused)
    assert resolve.startswith(f"unbroken resolve {cli_agents.RUN_ID} {cli_agents.CALL_ID} --result TEXT")
    (resume,) = hints(run_hint(invoke, resolve))
    assert f"--store {place.url}" in resume
    finished = run_hint(invoke, resume)
    assert "completed" in finished.output and len(cli_agents.sends(place.outbox)) == 1


def test_the_hints_of_a_run_awaiting_approval_approve_it_and_resume_it(place: Place, invoke: Invoke) -> None:
    agent = "hint_agents:approving_agent"
    hint_agents.approving_agent().run(cli_agents.TASK, run_id="ask")
    shown = invoke("show", "ask", "--store", place.url)
    assert "awaiting_approval" in shown.output
    listed = run_hint(invoke, f"unbroken approvals ask --store {place.url}")
    approve, deny = hints(listed)
    assert deny.startswith(f"unbroken deny ask {cli_agents.CALL_ID} --reason TEXT")
    (resume,) = hints(run_hint(invoke, approve, agent))
    finished = run_hint(invoke, resume, agent)
    assert "completed" in finished.output
    assert (place.outbox / "approved.log").read_text() == "ann@example.com\n"


def test_the_hints_of_fork_import_and_a_queued_run_run_as_printed(seeded: Place, invoke: Invoke) -> None:
    forked = invoke("fork", "done-run", "--at", "2", "--as", "branch", "--store", seeded.url)
    assert forked.exit_code == 0, forked.output
    (resume,) = hints(forked)
    assert run_hint(invoke, resume).exit_code == 0
    submitted = invoke(
        "submit", "--agent", "cli_agents:make_agent", "--task", "Tell Cy", "--run-id", "waiting", "--store", seeded.url
    )
    assert submitted.exit_code == 0, submitted.output
    queued = invoke("resume", "waiting", "--agent", "cli_agents:make_agent", "--store", seeded.url)
    assert queued.exit_code == 2
    (worker,) = hints(queued)
    assert "--until-idle" in worker
    run_hint(invoke, worker)
    with open_store(seeded.url) as store:
        assert store.load("waiting").phase == "completed"


def test_a_run_id_one_typo_away_gets_did_you_mean(seeded: Place, invoke: Invoke) -> None:
    result = invoke("show", "done-rnu", "--store", seeded.url)
    assert result.exit_code == 2
    assert "did you mean 'done-run'" in result.output
    unrelated = invoke("show", "zzzzzz", "--store", seeded.url)
    assert "did you mean" not in unrelated.output


def test_a_sqlite_url_with_three_slashes_for_an_absolute_path_gets_the_four_slash_form(
    place: Place, invoke: Invoke, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # the relative path the three slashes name is not here
    three = "sqlite://" + str(place.db)  # sqlite:///tmp/.../runs.db: the relative tmp/.../runs.db
    with open_store(place.url):
        pass
    result = invoke("runs", "--store", three)
    assert result.exit_code == 2
    assert f"an absolute path takes four slashes, sqlite:///{place.db}" in " ".join(result.output.split())


@pytest.mark.parametrize("task", [{"to": "ann"}, ["a"], 7])
def test_a_task_that_is_not_a_string_is_refused_naming_its_type_before_anything_is_written(
    place: Place, task: object
) -> None:
    with open_store(place.url) as store:
        agent = cli_agents.build_agent(store, place.outbox)
        with pytest.raises(InvalidTask, match=f"not {type(task).__name__}") as refused:
            agent.run(task, run_id="typed")  # type: ignore[arg-type]
        assert isinstance(refused.value, TypeError)
        assert not store.exists("typed") and store.list_runs() == []
