"""Fixtures of the inspector's tests: a real SQLite store holding real runs (one crashed and
resumed, one paused on an unknown outcome, one awaiting approval), ``unbroken ui`` started as
a child process, and Debian's headless Chromium driven through chromedriver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ui_agents import XSS, approval_agent
from ui_server import Server, start_server
from ui_world import World, run_child
from webdriver import Browser

from unbroken import open_store


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("ui-world")
    url = f"sqlite:///{root / 'runs.db'}"
    run_child(url, "invoice-acme", "invoice", root / "invoices.jsonl", crash_at="tool.after_execute:1")
    run_child(url, "invoice-acme", "invoice", root / "invoices.jsonl")  # resumed: completed
    run_child(url, "refund-a17", "unknown", root / "refunds.jsonl", crash_at="tool.after_execute:1")
    run_child(url, "refund-a17", "unknown", root / "refunds.jsonl")  # resumed: paused, outcome unknown
    transfers: list[str] = []
    with open_store(url) as store:
        approval_agent(store, transfers).run(f"Pay ACME's invoice {XSS}", run_id="wire-acme")
    return World(root, url, transfers)


@pytest.fixture(scope="session")
def server(world: World) -> Iterator[Server]:
    started = start_server(world.url, actions=True)
    yield started
    started.stop()


@pytest.fixture(scope="session")
def browser(server: Server) -> Iterator[Browser]:
    opened = Browser()
    opened.get(f"{server.base}/#token={server.token}")  # the URL `unbroken ui` printed
    yield opened
    opened.quit()
