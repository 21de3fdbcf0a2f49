"""`unbroken show` prints what each turn of every provider format did: the calls with their
arguments, the results with their call ids, reasoning marked as such; never a blank message."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from provider_agents import SYSTEM, TASK, TOOLS, build_model
from provider_server import SCRIPTS, ProviderServer, scripted

from unbroken import Agent, open_store
from unbroken.cli import main

# (provider, the first call's id, the line of its reasoning)
CASES = [
    ("anthropic", "toolu_01", "(thinking: Weather first, then a note.)"),
    ("openai-chat", "call_01", "(thinking: a field this SDK version does not model)"),
    ("openai-responses", "call_01", "(thinking: Weather first.)"),
]


@pytest.mark.parametrize(("provider", "first_call", "thinking"), CASES)
def test_show_prints_calls_results_and_reasoning_of_every_provider_format(
    server: ProviderServer, tmp_path: Path, provider: str, first_call: str, thinking: str
) -> None:
    script, turn_of = SCRIPTS[provider]
    server.responder = scripted(script, turn_of)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        Agent(model=build_model(provider, server.url), tools=TOOLS, store=store, system=SYSTEM).run(TASK, run_id="r")
    result = CliRunner().invoke(main, ["show", "r", "--messages", "40", "--store", url])
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    messages = [line for line in lines if line[:1].isdigit() and ": " in line]
    assert messages, result.output
    assert not [line for line in messages if line.endswith(":")], result.output  # no blank message
    assert f'call lookup({{"city": "Paris"}}) [{first_call}]' in result.output
    assert f"result [{first_call}] 'Paris: 21C, clear'" in result.output
    assert thinking in result.output
    assert "'Paris and " in result.output  # the final answer's text
