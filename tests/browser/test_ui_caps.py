"""A 1.3 MB tool result reaches the page as its first 64 KB and a "show all" button; the button
streams the rest into the same box (Debian's headless Chromium against `unbroken ui`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_server import Server, start_server
from webdriver import Browser

from unbroken import Agent, ScriptedModel, open_store, tool
from unbroken.message_parts import PART_CAP

SPOOF = "invoice\u202etxt.exe"  # shows as "invoiceexe.txt" where the override is obeyed
BIG = "".join(f"line {n:07d} of a very long page\n" for n in range(40_000))


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('ui-caps')) / 'runs.db'}"

    @tool(effect="read_only")
    def read_page(url: str) -> str:
        """Read a page."""
        return BIG

    script = [
        {
            "content": [{"type": "tool_use", "id": "toolu_big", "name": "read_page", "input": {"url": "x"}}],
            "stop_reason": "tool_use",
            "usage": {},
        },
        {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {}},
    ]
    with open_store(url) as store:
        Agent(ScriptedModel(script), tools=[read_page], store=store, max_result_bytes=None).run("read", run_id="big")
        final = [{"content": [{"type": "text", "text": SPOOF}], "stop_reason": "end_turn", "usage": {}}]
        Agent(ScriptedModel(final), store=store).run(SPOOF, run_id="spoof")
    server = start_server(url, actions=False)
    yield server
    server.stop()


def test_a_long_result_shows_its_head_and_show_all_streams_the_rest(browser: Browser, big_server: Server) -> None:
    browser.get(f"{big_server.base}/runs/big")
    browser.wait('.part.tool_result[data-result="toolu_big"]')
    shown = browser.execute("return document.querySelector('.part.tool_result pre').textContent.length")
    assert shown == PART_CAP
    browser.click(".show-all")
    browser.wait_until(f"document.querySelector('.part.tool_result pre').textContent.length === {len(BIG)}", 30)
    whole = browser.execute("return document.querySelector('.part.tool_result pre').textContent")
    assert whole == BIG
    assert browser.execute("return document.querySelector('.show-all')") is None


def test_bidi_overrides_are_shown_not_obeyed(browser: Browser, big_server: Server) -> None:
    browser.get(f"{big_server.base}/runs/spoof")
    browser.wait(".part.text")
    text = browser.text(".msg.role-assistant .part.text")
    assert text == "invoice\\u202etxt.exe"
    assert "\u202e" not in browser.execute("return document.body.textContent")
