"""The inspector sends no message part whole past 64 KB (the rest streams on "show all"), and
bound to a network address it answers only its own names and only with the token."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from unbroken import Agent, ScriptedModel, open_store, tool
from unbroken.message_parts import PART_CAP
from unbroken.ui.server import answered_hosts, create_app

BIG = "".join(f"line {n:07d} of a very long page\n" for n in range(40_000))  # ~1.3 MB


@pytest.fixture
def big_run(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"

    @tool(effect="read_only")
    def read_page(url: str) -> str:
        """Read a page."""
        return BIG

    script = [
        {
            "content": [{"type": "tool_use", "id": "toolu_big", "name": "read_page", "input": {"url": "x" * 100_000}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {}},
    ]
    with open_store(url) as store:
        Agent(ScriptedModel(script), tools=[read_page], store=store, max_result_bytes=None).run("read", run_id="big")
    return url


def test_a_long_part_is_cut_and_show_all_streams_it_whole(big_run: str) -> None:
    with open_store(big_run) as store, TestClient(create_app(store)) as client:
        page = client.get("/api/runs/big").json()
        parts = {
            part["kind"]: (message["index"], n, part)
            for message in page["messages"]
            for n, part in enumerate(message["parts"])
        }
        index, n, result = parts["tool_result"]
        assert len(result["text"]) == PART_CAP and result["more"] == len(BIG) - PART_CAP
        assert len(json.dumps(page)) < 4 * PART_CAP
        whole = client.get(f"/api/runs/big/messages/{index}/parts/{n}")
        assert whole.status_code == 200 and whole.text == BIG
        call_index, call_n, call = parts["tool_call"]
        assert call["more"] > 0 and len(call["arguments"]) == PART_CAP
        arguments = client.get(f"/api/runs/big/messages/{call_index}/parts/{call_n}").text
        assert json.loads(arguments) == {"url": "x" * 100_000}
        assert client.get(f"/api/runs/big/messages/{index}/parts/9").status_code == 400


def test_reads_need_the_token_when_the_server_is_reachable_from_the_network(big_run: str) -> None:
    with open_store(big_run) as store:
        app = create_app(store, token="s3cret-token", reads_need_token=True)
        with TestClient(app) as client:
            assert client.get("/api/runs").status_code == 401
            assert client.get("/api/runs/big").status_code == 401
            assert client.get("/api/runs/big/events").status_code == 401
            assert client.get("/api/runs", headers={"X-Unbroken-Token": "wrong"}).status_code == 401
            assert client.get("/api/runs", headers={"X-Unbroken-Token": "s3cret-token"}).status_code == 200
            assert client.get("/api/runs?token=s3cret-token").status_code == 200
            assert client.get("/").status_code == 200  # the page itself holds no run data


def test_bound_to_every_interface_only_the_names_given_answer() -> None:
    hosts = answered_hosts("0.0.0.0", 8765, ["agents.internal"])
    assert "agents.internal:8765" in hosts and "localhost:8765" in hosts
    assert f"{socket.gethostname().lower()}:8765" in hosts
    assert "evil.example:8765" not in hosts


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(port: int, path: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_unbroken_ui_on_0000_refuses_other_hosts_and_reads_without_the_token(big_run: str) -> None:
    port = _free_port()
    args = [sys.executable, "-m", "unbroken.cli", "ui", "--store", big_run, "--host", "0.0.0.0", "--port", str(port)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
        assert "#token=" in line, line
        token = line.split("#token=", 1)[1].split()[0]
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                select.select([], [], [], 0.05)
        here = {"Host": f"localhost:{port}"}
        assert _get(port, "/api/runs", here) == 401
        assert _get(port, "/api/runs", {**here, "X-Unbroken-Token": token}) == 200
        rebound = {"Host": f"evil.example:{port}", "X-Unbroken-Token": token}
        assert _get(port, "/api/runs", rebound) == 421
    finally:
        process.terminate()
        process.communicate(timeout=10)
