"""Actions are guarded: off unless enabled, and only with the per-start token from the same
origin; the server answers only to its own host name. HTTP requests to `unbroken ui` started as
a child process on a real SQLite store; each refused request must leave the run as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_agents import approval_agent
from ui_server import Server, action_headers, request, start_server

from unbroken import open_store, ops


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-guard') / 'runs.db'}"
    with open_store(url) as store:
        approval_agent(store, []).run("Pay ACME", run_id="warm")
    return url


@pytest.fixture(scope="module")
def guarded(store_url: str) -> Iterator[Server]:
    server = start_server(store_url, actions=True)
    yield server
    server.stop()


def waiting_run(store_url: str, run_id: str) -> None:
    with open_store(store_url) as store:
        assert approval_agent(store, []).run("Pay ACME", run_id=run_id).status == "awaiting_approval"


def approval_status(store_url: str, run_id: str) -> str:
    with open_store(store_url) as store:
        (waiting,) = ops.pending_approvals(store, run_id)
    return waiting.status


REFUSED = {
    "no token": {"X-Unbroken-Token": ""},
    "wrong token": {"X-Unbroken-Token": "not-the-token"},
    "cross-site origin": {"Origin": "http://evil.example"},
    "cross-site fetch": {"Sec-Fetch-Site": "cross-site"},
    "same-site fetch": {"Sec-Fetch-Site": "same-site"},
    "form post": {"Content-Type": "application/x-www-form-urlencoded"},
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_an_action_missing_the_token_or_from_another_site_is_refused_and_changes_nothing(
    guarded: Server, store_url: str, case: str
) -> None:
    run_id = "wire-" + case.replace(" ", "-")
    waiting_run(store_url, run_id)
    headers = action_headers(guarded, **REFUSED[case])
    status, body = request(guarded, "POST", f"/api/runs/{run_id}/approve", {"call_id": "toolu_wire"}, headers)
    assert status == 403, body
    assert approval_status(store_url, run_id) == "requested"


def test_the_same_action_with_the_token_from_the_page_s_origin_runs(guarded: Server, store_url: str) -> None:
    waiting_run(store_url, "wire-ok")
    headers = action_headers(guarded, **{"Sec-Fetch-Site": "same-origin"})
    status, body = request(guarded, "POST", "/api/runs/wire-ok/approve", {"call_id": "toolu_wire"}, headers)
    assert status == 200, body
    assert approval_status(store_url, "wire-ok") == "approved"


def test_a_request_addressed_to_another_host_name_is_refused(guarded: Server) -> None:
    port = guarded.base.rsplit(":", 1)[1]
    status, body = request(guarded, "GET", "/api/runs", headers={"Host": f"rebound.example:{port}"})
    assert status == 421, body


def test_pages_forbid_scripts_from_elsewhere_and_framing(guarded: Server) -> None:
    import urllib.request

    with urllib.request.urlopen(guarded.base + "/") as response:
        policy = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_actions_are_refused_when_the_server_was_started_without_them(store_url: str, tmp_path: Path) -> None:
    waiting_run(store_url, "wire-read-only")
    server = start_server(store_url, actions=False)
    try:
        assert server.token is None  # nothing printed to act with
        headers = action_headers(server, **{"X-Unbroken-Token": "anything"})
        status, body = request(server, "POST", "/api/runs/wire-read-only/approve", {"call_id": "toolu_wire"}, headers)
        assert status == 403 and "--enable-actions" in body["error"]
        status, run = request(server, "GET", "/api/runs/wire-read-only")
        assert status == 200 and run["actions"] is False and run["phase"] == "awaiting_approval"
    finally:
        server.stop()
    assert approval_status(store_url, "wire-read-only") == "requested"
