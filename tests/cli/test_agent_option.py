"""``--agent`` means the same in every command: an Agent, a function taking no arguments, or a
function taking the store, named as ``module:attr`` or ``path/to/file.py:attr``."""

from __future__ import annotations

import itertools
from pathlib import Path

import cli_agents
import pytest
from cli_helpers import Invoke, Place

from unbroken import open_store

AGENTS_MODULE = """
import os
from pathlib import Path

import cli_agents

def no_arguments():
    return cli_agents.make_agent()

def takes_store(store):
    return cli_agents.build_agent(store, Path(os.environ[cli_agents.OUTBOX_ENV]))

agent = cli_agents.make_agent()
"""
CHAOS_AGENTS_MODULE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "reliability")!r})

import chaos_agent
from unbroken import open_store

def no_arguments():
    return chaos_agent.make_agent(open_store("memory://"))

def takes_store(store):
    return chaos_agent.make_agent(store)

agent = chaos_agent.make_agent(open_store("memory://"))
"""
FORMS = list(itertools.product(["module", "file"], ["agent", "no_arguments", "takes_store"]))
_names = itertools.count()


def agent_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, naming: str, attr: str, source: str = AGENTS_MODULE
) -> str:
    """Write a fresh agents module (a new name each time: no import cache shared between tests)."""
    name = f"agents_under_test_{next(_names)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    if naming == "file":
        return f"{path}:{attr}"
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:{attr}"


@pytest.mark.parametrize(("naming", "attr"), FORMS)
def test_resume_takes_every_form_of_agent(
    seeded: Place, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, naming: str, attr: str
) -> None:
    spec = agent_spec(tmp_path, monkeypatch, naming, attr)
    result = invoke("resume", "open-run", "--agent", spec, "--store", seeded.url)
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        assert store.load("open-run").phase == "completed"


@pytest.mark.parametrize(("naming", "attr"), FORMS)
def test_resume_without_store_uses_the_agents_own_store_or_the_default_one(
    seeded: Place, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, naming: str, attr: str
) -> None:
    monkeypatch.chdir(tmp_path)  # the default store of a store-taking function: ./unbroken.db
    (tmp_path / "unbroken.db").symlink_to(seeded.db)
    spec = agent_spec(tmp_path, monkeypatch, naming, attr)
    result = invoke("resume", "open-run", "--agent", spec)
    assert result.exit_code == 0, result.output
    with open_store(seeded.url) as store:
        assert store.load("open-run").phase == "completed"


@pytest.mark.parametrize(("naming", "attr"), FORMS)
def test_submit_and_worker_take_every_form_of_agent(
    place: Place, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, naming: str, attr: str
) -> None:
    spec = agent_spec(tmp_path, monkeypatch, naming, attr)
    open_store(place.url).close()  # the store exists; workers need one to claim from
    submitted = invoke("submit", "--agent", spec, "--task", cli_agents.TASK, "--run-id", "queued", "--store", place.url)
    assert submitted.exit_code == 0, submitted.output
    worked = invoke("worker", "--agent", spec, "--until-idle", "--store", place.url)
    assert worked.exit_code == 0, worked.output
    with open_store(place.url) as store:
        assert store.load("queued").phase == "completed"
    assert len(cli_agents.sends(place.outbox)) == 1


def test_a_store_taking_function_is_called_with_the_store_it_runs_on(
    seeded: Place, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unbroken.agent_ref import load_agent

    ref = load_agent(agent_spec(tmp_path, monkeypatch, "file", "takes_store"))
    with open_store(seeded.url) as store:
        assert ref.needs_store and ref.build(store).store is store


def test_an_agent_on_another_store_is_copied_onto_the_given_one_and_left_unchanged(
    seeded: Place, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unbroken.agent_ref import load_agent

    ref = load_agent(agent_spec(tmp_path, monkeypatch, "module", "agent"))
    with open_store(f"sqlite:///{tmp_path / 'other.db'}") as other:
        built = ref.build(other)
        assert built.store is other and ref.target.store is not other


@pytest.mark.parametrize(("naming", "attr"), FORMS)
def test_chaos_takes_every_form_of_agent(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, naming: str, attr: str
) -> None:
    monkeypatch.chdir(tmp_path)  # chaos's children import a module agent from the working directory
    spec = agent_spec(tmp_path, monkeypatch, naming, attr, CHAOS_AGENTS_MODULE)
    args = ["--task", "ship order 42", "--point", "tool.after_execute:1", "--kills", "0", "--workdir", str(tmp_path)]
    result = invoke("chaos", "--agent", spec, *args)
    assert result.exit_code == 0, result.output
    assert "0 violations" in " ".join(result.output.split())


def test_a_file_named_like_an_imported_module_never_replaces_it(
    seeded: Place, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import sys

    from unbroken.agent_ref import load_agent

    (tmp_path / "json.py").write_text(AGENTS_MODULE, encoding="utf-8")
    ref = load_agent(f"{tmp_path / 'json.py'}:takes_store")
    assert ref.needs_store and sys.modules["json"] is json
