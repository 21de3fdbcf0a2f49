"""End to end with the real ``claude`` CLI bundled in ``claude-agent-sdk``, pointed at a local
stand-in for the Messages API: a session whose transcript is kept in an unbroken store resumes
on a machine that has none of the CLI's local files (a fresh ``CLAUDE_CONFIG_DIR``), and the
model is sent the whole earlier conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query
from claude_agent_sdk.types import SessionStore
from messages_stub import MessagesStub, texts

from unbroken import open_store
from unbroken.integrations.claude_agent import UnbrokenSessionStore


@pytest.fixture
def stub() -> Iterator[MessagesStub]:
    server = MessagesStub(lambda body: f"noted ({len(body.get('messages', []))} messages)").start()
    yield server
    server.stop()


def ask(prompt: str, store: UnbrokenSessionStore, stub: MessagesStub, config: Path, resume: str | None) -> str:
    env = {
        "ANTHROPIC_BASE_URL": stub.url,
        "ANTHROPIC_API_KEY": "sk-test-not-a-key",
        "CLAUDE_CONFIG_DIR": str(config),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
    }
    work = config.parent.parent / "work"  # one project directory: the SDK's project key is made from it
    work.mkdir(exist_ok=True)
    transcripts = cast(SessionStore, store)  # met by shape (list_session_summaries is left out)
    options = ClaudeAgentOptions(session_store=transcripts, max_turns=2, env=env, resume=resume, cwd=str(work))

    async def go() -> str:
        session = ""
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                session = message.session_id
        return session

    return asyncio.run(go())


def test_a_session_resumes_from_the_unbroken_store_on_a_machine_without_its_files(
    tmp_path: Path, stub: MessagesStub
) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = ask(
        "Remember the number 41", UnbrokenSessionStore(open_store(url)), stub, tmp_path / "a" / "config", None
    )
    assert session
    store = UnbrokenSessionStore(open_store(url))
    transcripts = [row.run_id for row in store.store.list_runs() if row.run_id.startswith("claude.")]
    assert len(transcripts) == 1  # the session's transcript is an unbroken run
    project = str(store._log(transcripts[0]).head()["project_key"])
    assert [row["session_id"] for row in asyncio.run(store.list_sessions(project))] == [session]

    # Another machine: a config directory with none of the CLI's local transcripts.
    assert ask("Which number?", store, stub, tmp_path / "b" / "config", session) == session
    said = texts(stub.requests[-1])
    assert "Remember the number 41" in said and "Which number?" in said  # the earlier turn came from the store
    assert any(text.startswith("noted") for text in said)
