"""Guarantee 8: ``unbroken chaos`` runs the sweep on a user's agent and fails CI on a violation."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from reliability_agents import AGENT, FORGETFUL_AGENT, TASK

import unbroken.cli.chaos  # noqa: F401  (registers the command)
from unbroken.cli import main


def _chaos(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["chaos", "--task", TASK, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_chaos_prints_the_crash_points_and_exits_0_when_every_invariant_holds(scratch: Path) -> None:
    code, output = _chaos(
        "--agent", AGENT, "--kills", "6", "--seed", "3", "--per-point", "1", "--workdir", str(scratch)
    )
    assert code == 0, output
    for column in ("crash point", "kills", "resumes", "violations"):
        assert column in output
    assert "tool.after_execute" in output and "random" in output
    assert " 0 violations" in output


def test_chaos_exits_1_and_names_the_violation_when_a_side_effect_repeats(scratch: Path) -> None:
    code, output = _chaos("--agent", FORGETFUL_AGENT, "--kills", "0", "--per-point", "2", "--workdir", str(scratch))
    assert code == 1
    assert "side effect at most once" in output


def test_chaos_refuses_an_attribute_that_is_not_an_agent(scratch: Path) -> None:
    code, output = _chaos("--agent", f"{AGENT.rsplit(':', 1)[0]}:SCRIPT", "--workdir", str(scratch))
    assert code == 2
    assert "Agent" in output


def test_a_postgres_url_in_the_environment_does_not_disturb_a_sqlite_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNBROKEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    result = CliRunner().invoke(main, ["chaos", "--agent", AGENT + "_missing", "--task", TASK])
    assert "--store-url" not in result.output
    assert result.exit_code == 2
