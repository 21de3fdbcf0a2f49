"""In-process SDK tools through ``durable_tools``, end to end with real processes and the real
``claude`` CLI bundled in ``claude-agent-sdk`` (a local stand-in plays the model, and reuses the
id ``toolu_01`` for every call as local servers do): the process hosting a payment is killed
inside it; a second process resumes the session, the model asks for that payment again (with
the same id in a new turn, or with a new id as a real model would) and then for another
payment (reusing the id, or a new one). Each payment is made once and the session ends with a
final answer."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from messages_stub import MessagesStub, ToolUse, texts, tool_results

from unbroken import open_store
from unbroken.integrations.claude_agent import tools_run_id

CHILD = Path(__file__).with_name("claude_tools_child.py")
FIRST, AGAIN = "Pay invoice A", "Continue: check what was paid, then pay invoice B"
A = ToolUse("toolu_01", "mcp__pay__charge", {"invoice": "A", "amount": 5})
RETRIES = {  # after the resume: A asked again, then B
    "same-id": (A, ToolUse("toolu_01", "mcp__pay__charge", {"invoice": "B", "amount": 7})),
    "new-id": (
        ToolUse("toolu_02", "mcp__pay__charge", {"invoice": "A", "amount": 5}),
        ToolUse("toolu_03", "mcp__pay__charge", {"invoice": "B", "amount": 7}),
    ),
}


class Model:
    """The stand-in's script: pay A; after the resume, pay A again (a model told the call may
    not have completed), then B, then end. The resumed turns are counted by the stand-in, not
    read from the request: the CLI (2.1.332) runs a call whose id the session already holds, but
    sends it back to the model as "[Tool use interrupted]" without its result."""

    def __init__(self, retry: str) -> None:
        self.retry = RETRIES[retry]
        self.resumed_turns = 0

    def __call__(self, body: dict[str, Any]) -> str | ToolUse:
        if not any(AGAIN in text for text in texts(body)):
            return A if not tool_results(body) else "stopped"
        self.resumed_turns += 1
        return {1: self.retry[0], 2: self.retry[1]}.get(self.resumed_turns, "done: A and B are paid")


def run_child(
    tmp: Path, stub: MessagesStub, prompt: str, resume: str, probe: bool, kill_after: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "KILL_AFTER_INVOICE"}
    if kill_after is not None:
        env["KILL_AFTER_INVOICE"] = kill_after
    (tmp / "work").mkdir(exist_ok=True)
    args = [f"sqlite:///{tmp / 'agents.db'}", str(tmp / "journal.jsonl"), stub.url, str(tmp / "config")]
    args += [str(tmp / "work"), prompt, resume, "probe" if probe else "no-probe"]
    return subprocess.run([sys.executable, str(CHILD), *args], env=env, capture_output=True, text=True, timeout=120)


def payments(tmp: Path) -> list[dict[str, Any]]:
    journal = tmp / "journal.jsonl"
    return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []


def session_of(stub: MessagesStub) -> str:
    """The session id the CLI sent with its requests (metadata.user_id holds it)."""
    for body in stub.requests:
        user = str(body.get("metadata", {}).get("user_id", ""))
        found = re.search(r'session[_a-z]*"?\s*[:_]\s*"?([0-9a-f-]{36})', user)
        if found:
            return found.group(1)
    raise AssertionError(f"no session id in the requests: {[b.get('metadata') for b in stub.requests]}")


@pytest.mark.parametrize(
    ("retry", "probe"),
    [
        ("same-id", True),
        ("new-id", True),
        pytest.param("same-id", False, marks=pytest.mark.slow),
        pytest.param("new-id", False, marks=pytest.mark.slow),
    ],
    ids=["same-id-probe", "new-id-probe", "same-id-no-probe", "new-id-no-probe"],
)
def test_killed_inside_a_payment_the_resumed_session_pays_each_invoice_once(
    tmp_path: Path, retry: str, probe: bool
) -> None:
    stub = MessagesStub(Model(retry)).start()
    try:
        check_each_invoice_paid_once(tmp_path, stub, retry, probe)
    finally:
        stub.stop()


def check_each_invoice_paid_once(tmp_path: Path, stub: MessagesStub, retry: str, probe: bool) -> None:
    killed = run_child(tmp_path, stub, FIRST, "-", probe, kill_after="A")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [p["invoice"] for p in payments(tmp_path)] == ["A"]
    session = session_of(stub)

    resumed = run_child(tmp_path, stub, AGAIN, session, probe)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"session": session, "answer": "done: A and B are paid"}
    assert [p["invoice"] for p in payments(tmp_path)] == ["A", "B"]  # A was asked twice, made once
    ledger = open_store(f"sqlite:///{tmp_path / 'agents.db'}").ledger_list(tools_run_id(session))
    results = {entry.key: entry for entry in ledger}
    paid_a, paid_b = (results[payment["key"]] for payment in payments(tmp_path))
    if probe:  # the probe found the payment the killed process made; the model is told so
        assert (paid_a.status, paid_a.result and paid_a.result.how) == ("succeeded", "probed")
        assert paid_a.result is not None and paid_a.result.content == "charged 5 for A"
    else:  # no probe: UNKNOWN OUTCOME, never a second payment on a guess
        assert paid_a.status == "unknown"
    assert paid_b.status == "succeeded" and paid_b.result is not None and "charged 7 for B" in paid_b.result.content
    assert len(ledger) == 2
    if retry == "new-id":  # with ids of its own, the CLI hands the model each answer
        said = [json.dumps(block.get("content")) for block in tool_results(stub.requests[-1])[-2:]]
        assert ("charged 5 for A" if probe else "UNKNOWN OUTCOME") in said[0] and "charged 7 for B" in said[1]
