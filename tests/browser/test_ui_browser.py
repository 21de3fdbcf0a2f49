"""The inspector driven like a user would: Debian's headless Chromium against `unbroken ui` on a
real SQLite store with real runs. Two screenshots for the docs are taken here (into docs/images
with UNBROKEN_UPDATE_DOCS_IMAGES=1, else into a temporary directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ui_agents import approval_agent
from ui_server import Server
from ui_world import AGENTS, World
from webdriver import Browser

from unbroken import open_store, ops

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
# The screenshots in the docs are retaken only when asked (a test run leaves the tree as it was).
IMAGES = DOCS_IMAGES if os.environ.get("UNBROKEN_UPDATE_DOCS_IMAGES") == "1" else Path(tempfile.mkdtemp())


def test_the_runs_list_shows_each_run_and_filters_those_needing_attention(browser: Browser, server: Server) -> None:
    browser.get(f"{server.base}/")
    browser.wait('tr[data-run="refund-a17"]')
    assert browser.text('tr[data-run="invoice-acme"] [data-phase]') == "completed"
    assert browser.text('tr[data-run="refund-a17"] [data-phase]') == "paused"
    assert browser.text('tr[data-run="wire-acme"] [data-phase]') == "awaiting approval"
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.screenshot(IMAGES / "ui-runs.png")
    browser.click("#attention")
    browser.click("#filters button")
    browser.wait_until("location.search.includes('attention=1') && document.querySelector('tr[data-run]')")
    shown = browser.execute("return [...document.querySelectorAll('tr[data-run]')].map(r => r.dataset.run)")
    assert sorted(shown) == ["refund-a17", "wire-acme"]


def test_a_crashed_run_shows_where_it_crashed_how_each_call_was_settled_and_its_ledger(
    browser: Browser, server: Server
) -> None:
    browser.get(f"{server.base}/")
    browser.click('tr[data-run="invoice-acme"] a')
    browser.wait("#timeline")
    notes = browser.execute(
        "return [...document.querySelectorAll('tr[data-notes-for]')].map(r => [r.dataset.notesFor, r.innerText.trim()])"
    )
    # What the engine recorded (issue 21 item 6): the resume's own record, then each settlement.
    assert notes[0][1].startswith("resumed after save")
    assert "the previous process ended while settling tool calls: 2 of" in notes[0][1]
    assert browser.text(f'tr[data-seq="{notes[0][0]}"]').split()[1] == "resumed"
    assert (
        "call toolu_inv (send_invoice): it was started before and its outcome never recorded; the probe found that "
        "it took effect; not run again: the probe's result is its result" in [text for _, text in notes]
    )
    call = browser.text('.part.tool_call[data-call="toolu_inv"]')
    assert "send_invoice" in call and '"customer": "ACME"' in call and '"amount": 1200' in call
    assert browser.execute("return document.querySelector('details.thinking').open") is False
    assert browser.text("#ledger .status-succeeded") == "succeeded"
    assert "the probe found that it took effect" in browser.text(".crash-mark")
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.screenshot(IMAGES / "ui-run.png")


def test_markup_in_tool_results_and_tasks_is_shown_as_text_never_run(browser: Browser, server: Server) -> None:
    browser.get(f"{server.base}/runs/invoice-acme")
    result = browser.text('.part.tool_result[data-result="toolu_look"] pre')
    assert '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>' in result
    assert browser.execute("return document.querySelectorAll('#conversation img, #conversation script').length") == 0
    browser.get(f"{server.base}/")
    assert "<script>" in browser.text('tr[data-run="wire-acme"]')
    assert browser.execute("return window.__pwned === undefined") is True


def test_resolving_an_unknown_outcome_from_the_page_settles_it_in_the_store(
    browser: Browser, server: Server, world: World
) -> None:
    browser.get(f"{server.base}/runs/refund-a17")
    browser.type('textarea[data-call="toolu_refund"]', "refund R-1 issued (checked in the payments console)")
    browser.click('button[data-action="took-effect"][data-call="toolu_refund"]')
    browser.wait_until("!document.querySelector('[data-unsettled]') && document.querySelector('#phase .phase')")
    assert browser.text("#phase").endswith("running tools")
    with open_store(world.url) as store:
        state = store.load("refund-a17")
    (call,) = state.pending_calls
    result = state.result_of(call)
    assert result is not None
    assert (result.how, result.content) == ("resolved", "refund R-1 issued (checked in the payments console)")
    assert state.phase == "running_tools"


def test_approving_a_waiting_call_from_the_page_records_it_and_the_run_then_executes_it_once(
    browser: Browser, server: Server, world: World
) -> None:
    browser.get(f"{server.base}/runs/wire-acme")
    browser.click('button[data-action="approve"][data-call="toolu_wire"]')
    browser.wait_until("!document.querySelector('[data-approval]')")
    with open_store(world.url) as store:
        (request,) = ops.pending_approvals(store, "wire-acme")
        assert (request.status, request.by) == ("approved", "unbroken ui")
        transfers: list[str] = []
        assert approval_agent(store, transfers).run(run_id="wire-acme").status == "completed"
    assert transfers == ["ACME"]


def test_a_live_run_updates_in_place_without_a_reload(browser: Browser, server: Server, world: World) -> None:
    live = subprocess.Popen(
        [sys.executable, str(AGENTS), world.url, "tickets-live", "live", str(world.root / "none")],
        stdout=subprocess.DEVNULL,
    )
    try:
        with open_store(world.url) as store:
            browser.wait_until("true")  # give the child a moment without a fixed sleep
            while not store.exists("tickets-live"):
                assert live.poll() is None
                browser.execute("return new Promise(r => setTimeout(r, 50))")
        browser.get(f"{server.base}/runs/tickets-live")
        browser.wait("#turns")
        browser.execute("window.__samePage = true")
        first = int(browser.text("#turns").split()[-1])
        browser.wait_until(
            f"parseInt(document.querySelector('#turns').innerText.split(/\\s+/).pop()) >= {first + 2}", timeout=20
        )
        assert browser.execute("return window.__samePage") is True  # updated in place, not reloaded
        assert browser.text("#live").startswith("live · save")
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()


def test_forking_from_a_save_point_on_the_page_opens_the_new_run(
    browser: Browser, server: Server, world: World
) -> None:
    browser.get(f"{server.base}/runs/invoice-acme")
    browser.click('button[data-action="fork"][data-seq="2"]')
    browser.wait_until("location.pathname === '/runs/invoice-acme.fork-2' && document.querySelector('#timeline')")
    with open_store(world.url) as store:
        (first, *_) = store.history("invoice-acme.fork-2")
        assert first.label == "forked from invoice-acme at save 2"
    assert "forked from invoice-acme at save 2" in browser.text('tr[data-seq="1"]')
