"""``unbroken chaos --store-kind redis|s3 --store-url URL`` runs the sweep on those stores: every
run of the sweep is saved there under its own run id, killed, resumed and checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))

from s3test import endpoint, new_bucket, store_url

import unbroken.cli.chaos  # noqa: F401  (registers the command)
from unbroken.cli import main

AGENT = str(Path(__file__).resolve().parents[2] / "reliability" / "chaos_agent.py") + ":make_agent"


@pytest.fixture(params=["redis", "s3"])
def kind_and_url(request: pytest.FixtureRequest) -> tuple[str, str]:
    if request.param == "redis":
        return "redis", request.getfixturevalue("redis_url")
    server = endpoint()
    return "s3", store_url(server, new_bucket(server))


def test_chaos_on_a_server_store_kills_resumes_and_finds_no_violation(kind_and_url: tuple[str, str]) -> None:
    kind, url = kind_and_url
    args = ["chaos", "--agent", AGENT, "--task", "ship order 42", "--store-kind", kind, "--store-url", url]
    args += ["--point", "tool.after_execute:1", "--kills", "0", "--driver", "sync"]

    result = CliRunner().invoke(main, args, catch_exceptions=False)

    assert result.exit_code == 0, result.output
    assert "0 violations" in result.output or "no violation" in result.output.lower(), result.output


def test_a_server_store_kind_without_a_url_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["chaos", "--agent", AGENT, "--task", "t", "--store-kind", "redis"])

    assert result.exit_code == 2
    assert "--store-url" in result.output
