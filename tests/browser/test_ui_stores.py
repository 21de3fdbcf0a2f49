"""The inspector reads and acts through the store's public API and ``ops`` only, so it works the
same on every store: the same session of requests against SQLite, a file store and PostgreSQL."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_agents import approval_agent, live_agent
from ui_server import action_headers, request, start_server

from unbroken import open_store, ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "postgres"))
from pgtest import fresh_schema


def next_head(events: Any) -> int:
    """The seq of the next ``head`` event on a server-sent events stream."""
    while True:
        line = events.readline()
        if line == b"event: head\n":
            seq: int = json.loads(events.readline().removeprefix(b"data: "))["seq"]
            return seq


@pytest.fixture(params=["sqlite", "file", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        with fresh_schema("ubui") as (_, url):
            yield url
    elif request.param == "file":
        yield f"file://{tmp_path / 'runs'}"
    else:
        yield f"sqlite:///{tmp_path / 'runs.db'}"


def test_the_inspector_lists_pages_shows_and_approves_on_every_store(store_url: str) -> None:
    with open_store(store_url) as store:
        approval_agent(store, []).run("Pay ACME", run_id="wire")
        for n in range(3):
            live_agent(store).replace(max_turns=1).run(f"Read tickets, batch {n}", run_id=f"batch-{n}")
    server = start_server(store_url, actions=True)
    try:
        status, first = request(server, "GET", "/api/runs?limit=2")
        assert status == 200 and len(first["runs"]) == 2 and first["next"] is not None
        status, rest = request(server, "GET", f"/api/runs?limit=2&after={first['next']}")
        assert rest["next"] is None
        listed = [run["run_id"] for run in first["runs"] + rest["runs"]]
        assert sorted(listed) == ["batch-0", "batch-1", "batch-2", "wire"]  # each once, over two pages
        status, attention = request(server, "GET", "/api/runs?attention=1")
        assert [run["run_id"] for run in attention["runs"]] == ["wire"]
        status, run = request(server, "GET", "/api/runs/wire")
        assert status == 200 and run["phase"] == "awaiting_approval"
        assert [(a["call_id"], a["status"]) for a in run["approvals"]] == [("toolu_wire", "requested")]
        with urllib.request.urlopen(f"{server.base}/api/runs/wire/events", timeout=30) as events:
            assert next_head(events) == run["seq"]
            status, done = request(
                server, "POST", "/api/runs/wire/approve", {"call_id": "toolu_wire"}, action_headers(server)
            )
            assert status == 200, done
            assert next_head(events) == run["seq"] + 1  # the decision's save point, pushed to the page
    finally:
        server.stop()
    with open_store(store_url) as store:
        assert [a.status for a in ops.pending_approvals(store, "wire")] == ["approved"]
