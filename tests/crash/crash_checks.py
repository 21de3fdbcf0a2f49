"""Helpers of the crash tests: run the driver in a child process, and judge a final history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unbroken.crashpoints import ENV_VAR

DRIVER = Path(__file__).with_name("crash_driver.py")


@dataclass(frozen=True)
class Child:
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def outcome(self) -> dict[str, Any]:
        return dict(json.loads(self.stdout.strip().splitlines()[-1]))


def run_child(args: Sequence[str], *, crash_at: str | None = None, timeout: float = 60.0) -> Child:
    """Run ``crash_driver.py ARGS`` in a fresh interpreter; with ``crash_at``, armed to SIGKILL
    itself at that crash point."""
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    if crash_at is not None:
        env[ENV_VAR] = crash_at
    done = subprocess.run(
        [sys.executable, str(DRIVER), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Child(done.returncode, done.stdout, done.stderr)


def tool_results(messages: Sequence[Any]) -> dict[str, list[Mapping[str, Any]]]:
    """Every tool_result block of an Anthropic history, grouped by the tool_use id it answers."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                found.setdefault(str(block["tool_use_id"]), []).append(block)
    return found


def history_problems(messages: Sequence[Any]) -> list[str]:
    """Why a provider would refuse this Anthropic history: a tool_use not answered in the very
    next user message, a tool_use answered twice, or a tool_result answering nothing."""
    problems = []
    asked: list[str] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        wanted = [str(b["id"]) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]
        if not wanted:
            continue
        asked += wanted
        following = messages[index + 1] if index + 1 < len(messages) else {}
        reply = following.get("content") if following.get("role") == "user" else None
        answered = [
            str(b["tool_use_id"])
            for b in (reply if isinstance(reply, list) else [])
            if isinstance(b, Mapping) and b.get("type") == "tool_result"
        ]
        for call_id in wanted:
            if answered.count(call_id) != 1:
                problems.append(f"tool_use {call_id} answered {answered.count(call_id)} times in the next message")
    for call_id, blocks in tool_results(messages).items():
        if call_id not in asked:
            problems.append(f"tool_result for {call_id}, which no tool_use asked for")
        if len(blocks) != 1:
            problems.append(f"tool_use {call_id} has {len(blocks)} tool_results in the history")
    return problems


def is_unknown(block: Mapping[str, Any]) -> bool:
    """True for the tool_result unbroken writes when a side effect's outcome is unknown."""
    text = str(block.get("content", ""))
    return block.get("is_error") is True and text.startswith("UNKNOWN OUTCOME") and "verify" in text
