"""The ``unbroken`` commands work on Redis and object-storage stores as on the others: a run
paused on an unknown outcome is listed, shown, its history and ledger printed, resolved from the
command line, resumed to completion, exported, migrated (a dry run) and its ledger collected."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))

import cli_child
from s3test import endpoint, new_bucket, store_url

from unbroken.cli import main
from unbroken.stores import open_store

CHILD = Path(__file__).with_name("cli_child.py")


@pytest.fixture(params=["redis", "s3"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store holding run r1, paused: its process was SIGKILLed right after sending the email,
    so on resume the outcome is unknown (the tool has no probe) and the run waits for a person."""
    if request.param == "redis":
        place = request.getfixturevalue("redis_url")
    else:
        server = endpoint()
        place = store_url(server, new_bucket(server))
    env = {**os.environ, "UNBROKEN_CRASH_AT": "tool.after_execute:1"}
    child = subprocess.run([sys.executable, str(CHILD), place], env=env, capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    result = cli_child.build(place, unknown_policy="pause").run(cli_child.TASK, run_id="r1")
    assert result.status == "paused"
    yield place


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_runs_show_history_and_effects_describe_the_paused_run(url: str) -> None:
    runs, show = invoke("runs", "--store", url), invoke("show", "r1", "--store", url)
    history, effects = invoke("history", "r1", "--store", url), invoke("effects", "r1", "--store", url)

    assert (runs.exit_code, show.exit_code, history.exit_code, effects.exit_code) == (0, 0, 0, 0), runs.output
    assert "r1" in runs.stdout and "paused" in runs.stdout
    assert cli_child.TASK in show.stdout and "send" in show.stdout
    assert "start" in history.stdout
    assert "send" in effects.stdout and "unknown" in effects.stdout


def test_resolve_from_the_command_line_lets_the_run_finish_without_sending_again(url: str) -> None:
    resolved = invoke("resolve", "r1", "c1", "--result", "sent by hand", "--store", url)

    assert resolved.exit_code == 0, resolved.output
    result = cli_child.build(url).run(cli_child.TASK, run_id="r1")
    with open_store(url) as store:
        entries = store.ledger_list("r1")
    assert result.status == "completed"
    assert [(e.tool, e.status, e.attempts) for e in entries] == [("send", "succeeded", 1)]


def test_export_migrate_and_gc_work_on_the_store(url: str) -> None:
    exported = invoke("export", "r1", "--store", url)
    migrated = invoke("migrate", "--store", url)
    collected = invoke("gc", "--older-than", "0s", "--store", url)

    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout)["state"]["task"] == cli_child.TASK
    assert migrated.exit_code == 0, migrated.output
    assert collected.exit_code == 0, collected.output
    with open_store(url) as store:  # the run is not finished: gc keeps its ledger
        assert len(store.ledger_list("r1")) == 1
