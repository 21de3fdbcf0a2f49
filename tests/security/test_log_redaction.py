"""Secrets never logged: a tool's exception message is logged with its type, cut short and with
anything that looks like a key, token or password masked; the full text only at DEBUG."""

from __future__ import annotations

import logging

import pytest

from unbroken import Agent, ScriptedModel, open_store, tool
from unbroken.redact import MESSAGE_LIMIT, describe, redact

SECRETS = {
    "postgresql://app:Hunter2-db-pass@db.internal/prod": "Hunter2-db-pass",
    "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345": "abcdefghijklmnopqrstuvwxyz012345",
    "api_key=live_51HqLyjWDarjtT1zdp7dc": "live_51HqLyjWDarjtT1zdp7dc",
    '{"password": "correct horse battery"}': "correct",
    "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv rejected": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
    "AWS AKIAIOSFODNN7EXAMPLE denied": "AKIAIOSFODNN7EXAMPLE",
    "token ghp_16C7e42F292c6912E7710c838347Ae178B4a": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "secret 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08": "9f86d081884c7d659a2feaa0c55ad015",
}


@pytest.mark.parametrize("text", list(SECRETS), ids=list(range(len(SECRETS))))
def test_what_looks_like_a_secret_is_masked(text: str) -> None:
    masked = redact(text)
    assert SECRETS[text] not in masked and "[redacted]" in masked


def test_ordinary_messages_are_kept() -> None:
    text = "file /var/data/report-2026-12-01.csv not found (errno 2): check the path"
    assert redact(text) == text


def test_a_long_message_is_cut() -> None:
    assert len(describe(ValueError("x " * 10_000))) < MESSAGE_LIMIT + 80


def test_a_tool_exception_with_a_secret_reaches_no_log_line_above_debug(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(effect="read_only")
    def connect() -> str:
        """Connect."""
        raise ConnectionError("could not connect to postgresql://app:Hunter2-db-pass@db.internal/prod")

    script = [
        {"content": [{"type": "tool_use", "id": "t1", "name": "connect", "input": {}}], "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    ]
    with caplog.at_level(logging.INFO), open_store("memory://") as store:
        Agent(ScriptedModel(script), tools=[connect], store=store).run("go", run_id="r")
    lines = [caplog.handler.format(record) for record in caplog.records]
    assert any("ConnectionError" in line and "[redacted]" in line for line in lines), lines
    assert not [line for line in lines if "Hunter2" in line]
