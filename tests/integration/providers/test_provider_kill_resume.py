"""For each provider: a real child process on the official SDK is SIGKILLed at save points and
resumed in fresh processes; the requests the provider received are byte-for-byte those of a run
that was never killed (a request lost with its process is re-sent identically)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from provider_agents import SYSTEM, TASK, TOOLS, build_model
from provider_server import SCRIPTS, ProviderServer, scripted

from unbroken import Agent, RunResult, open_store

CHILD = str(Path(__file__).with_name("provider_child.py"))

# Each process of the chain dies at the next point; the last one finishes the run.
KILL_CHAIN = [
    "save.model_turn.after:1",  # the first answer is saved, no tool has run
    "save.tool_result.after:1",  # one of the two parallel calls is answered
    "save.model_turn.before:1",  # the second request was sent, its answer is lost
]


def run_child(
    provider: str, server: ProviderServer, url: str, mode: str, crash_at: str | None = None, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNBROKEN_CRASH_AT"}
    if crash_at:
        env["UNBROKEN_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, CHILD, provider, server.url, url, "provider-run", mode, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_here(provider: str, server: ProviderServer, url: str, mode: str) -> RunResult:
    """The same agent, never killed, in this process."""
    model = build_model(provider, server.url, use_async=mode == "async")
    agent = Agent(model=model, tools=TOOLS, store=open_store(url), system=SYSTEM)
    if mode == "async":
        return asyncio.run(agent.arun(TASK, run_id="provider-run"))
    return agent.run(TASK, run_id="provider-run")


def without_repeats(bodies: list[bytes]) -> list[bytes]:
    kept: list[bytes] = []
    for body in bodies:
        if not kept or kept[-1] != body:
            kept.append(body)
    return kept


@pytest.mark.parametrize(
    ("provider", "mode"), [("anthropic", "sync"), ("openai-chat", "sync"), ("openai-responses", "async")]
)
def test_a_run_killed_at_save_points_sends_the_provider_exactly_the_requests_of_an_unkilled_run(
    tmp_path: Path, server: ProviderServer, provider: str, mode: str
) -> None:
    payloads, turn_of = SCRIPTS[provider]
    server.responder = scripted(payloads, turn_of)

    clean_url = f"sqlite:///{tmp_path / 'clean.db'}"
    clean = run_here(provider, server, clean_url, mode)
    assert clean.status == "completed"
    clean_bodies = server.bodies()
    assert len(clean_bodies) == 3
    server.requests.clear()

    killed_url = f"sqlite:///{tmp_path / 'killed.db'}"
    for crash_at in KILL_CHAIN:
        killed = run_child(provider, server, killed_url, mode, crash_at)
        assert killed.returncode == -signal.SIGKILL, (crash_at, killed.stderr)
    finished = run_child(provider, server, killed_url, mode)
    assert finished.returncode == 0, finished.stderr

    bodies = server.bodies()
    assert len(bodies) == 4  # the request lost at save.model_turn.before was sent again
    assert without_repeats(bodies) == clean_bodies
    assert finished.stdout.strip() == f'{{"status": "completed", "output": "{clean.output}", "turns": 3}}'
    resumed_state = open_store(killed_url).load("provider-run")
    clean_state = open_store(clean_url).load("provider-run")
    assert resumed_state.messages == clean_state.messages
    assert resumed_state.phase == "completed"
