"""User errors print one clear line on stderr and exit non-zero, without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import Invoke, Place
from click.testing import Result


def assert_one_line_error(result: Result, *, mentions: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # handled, not a crash
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and mentions in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["show", "nope"],
        ["history", "nope"],
        ["export", "nope"],
        ["effects", "nope"],
        ["resolve", "nope", "toolu_1", "--not-executed"],
        ["resume", "nope", "--agent", "cli_agents:make_agent"],
    ],
    ids=lambda command: command[0],
)
def test_an_unknown_run_is_one_line_naming_it(seeded: Place, invoke: Invoke, command: list[str]) -> None:
    assert_one_line_error(invoke(*command, "--store", seeded.url), mentions="no run 'nope'")


@pytest.mark.parametrize("url", ["bogus", "nosuch://x", "sqlite://somehost/x.db", "sqlite:///x.db?speed=max"])
def test_a_bad_store_url_is_one_line(invoke: Invoke, url: str) -> None:
    assert_one_line_error(invoke("runs", "--store", url), mentions="store URL")


def test_a_missing_store_file_is_reported_not_created(invoke: Invoke, tmp_path: Path) -> None:
    absent = tmp_path / "absent.db"
    assert_one_line_error(invoke("runs", "--store", f"sqlite:///{absent}"), mentions="no unbroken store at")
    assert not absent.exists()


@pytest.mark.parametrize(
    ("spec", "mentions"),
    [
        ("cli_agents", "must look like module:attr or path/to/file.py:attr"),
        ("no_such_module_for_unbroken:agent", "no module named 'no_such_module_for_unbroken'"),
        ("no/such/file.py:agent", "no file"),
        ("cli_agents:no_such_attr", "has no attribute 'no_such_attr'"),
        ("cli_agents:TASK", "not an Agent or a function returning one"),
        ("cli_agents:build_agent", "a function taking no arguments or taking the store"),
        ("os:getcwd", "returned a str, not an unbroken Agent"),
    ],
)
def test_a_bad_agent_spec_is_one_line(seeded: Place, invoke: Invoke, spec: str, mentions: str) -> None:
    assert_one_line_error(invoke("resume", "open-run", "--agent", spec, "--store", seeded.url), mentions=mentions)


def test_a_bad_duration_is_one_line(seeded: Place, invoke: Invoke) -> None:
    assert_one_line_error(invoke("gc", "--older-than", "7x", "--store", seeded.url), mentions="not a duration")


@pytest.mark.parametrize(
    "flags",
    [["--not-executed", "--result", "ok"], [], ["--not-executed", "--is-error"]],
    ids=["both", "neither", "is-error"],
)
def test_resolve_needs_exactly_one_verdict(seeded: Place, invoke: Invoke, flags: list[str]) -> None:
    result = invoke("resolve", "open-run", "toolu_send_1", *flags, "--store", seeded.url)
    assert_one_line_error(result, mentions="--")


def test_resolve_of_a_call_that_is_not_unsettled_names_the_open_ones(seeded: Place, invoke: Invoke) -> None:
    result = invoke("resolve", "open-run", "toolu_other", "--not-executed", "--store", seeded.url)
    assert_one_line_error(result, mentions="unsettled calls: none")


def test_the_installed_command_prints_no_traceback(seeded: Place) -> None:
    command = Path(sys.executable).with_name("unbroken")
    completed = subprocess.run(
        [str(command), "show", "nope", "--store", seeded.url], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert completed.stderr.strip().splitlines() == [f"error: no run 'nope' in {seeded.url}"]


@pytest.mark.parametrize(("command", "option"), [("history", "--tail"), ("show", "--messages")])
def test_a_negative_count_is_refused(seeded: Place, invoke: Invoke, command: str, option: str) -> None:
    result = invoke(command, "done-run", option, "-1", "--store", seeded.url)
    assert result.exit_code == 2 and "-1 is not in the range x>=0" in result.stderr, result.output


def test_a_sqlite_url_without_slashes_says_how_to_write_it(invoke: Invoke) -> None:
    assert_one_line_error(invoke("runs", "--store", "sqlite:runs.db"), mentions="write sqlite:///runs.db")
