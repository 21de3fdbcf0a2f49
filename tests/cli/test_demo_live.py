"""``unbroken demo --live``: the same agent against a real SDK client (Anthropic, pointed at a
local server on 127.0.0.1 through ``ANTHROPIC_BASE_URL``), killed and resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def anthropic_answer(body: dict[str, Any]) -> dict[str, Any]:
    """Answers chosen by how many assistant turns the request holds: six rounds of reading, then
    one email, then the final text."""
    turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
    if turn < 6:
        content = [
            {
                "type": "tool_use",
                "id": f"toolu_live_{turn}",
                "name": "read_ticket",
                "input": {"ticket_id": f"T-{1001 + turn}"},
            }
        ]
    elif turn == 6:
        email = {"subject": "Urgent tickets", "body": "T-1003 needs attention."}
        content = [{"type": "tool_use", "id": "toolu_live_mail", "name": "email_team", "input": email}]
    else:
        content = [{"type": "text", "text": "Done: report written, team emailed."}]
    return {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "end_turn" if turn > 6 else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + turn, "output_tokens": 20},
    }


@pytest.fixture
def fake_anthropic() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            data = json.dumps(anthropic_answer(body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run_demo(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "unbroken.cli", "demo", "--live", "--workdir", str(tmp_path / "work")],
        env={**clean, **env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_live_demo_runs_the_agent_on_the_real_sdk_kills_it_and_resumes_it(tmp_path: Path, fake_anthropic: str) -> None:
    done = run_demo(tmp_path, {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake_anthropic})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the Anthropic API, killed with SIGKILL" in done.stdout
    assert done.stdout.count("PASS") == 5 and "FAIL" not in done.stdout
    outbox = list((tmp_path / "work" / "outbox").glob("ub_*.json"))
    assert len(outbox) == 1


def test_live_demo_without_a_key_says_so_and_runs_the_scripted_demo(tmp_path: Path) -> None:
    done = run_demo(tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert "falling back to the scripted model" in done.stdout
    assert "all checks passed" in done.stdout
