"""The run strip at the top of a run's page, in Chromium: one bar per model turn sized by its
tokens, a red rule where the run was resumed after a crash, a dot per call settled on resume
coloured by how, drawn from the timeline the page already read (no extra request). Its
screenshot for the docs is retaken with UNBROKEN_UPDATE_DOCS_IMAGES=1."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ui_server import Server
from webdriver import Browser

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
IMAGES = DOCS_IMAGES if os.environ.get("UNBROKEN_UPDATE_DOCS_IMAGES") == "1" else Path(tempfile.mkdtemp())


def test_the_strip_draws_turns_crashes_and_settlements_of_a_crashed_run(browser: Browser, server: Server) -> None:
    browser.get(f"{server.base}/")
    browser.click('tr[data-run="invoice-acme"] a')
    browser.wait("#strip")
    marks = browser.execute(
        "return [...document.querySelectorAll('#strip [data-mark]')]"
        ".map(m => [m.dataset.mark, Number(m.dataset.seq), m.dataset.how || '', m.textContent])"
    )
    rows = browser.execute(
        "return [...document.querySelectorAll('#timeline tr[data-seq]')]"
        ".map(r => [Number(r.dataset.seq), r.querySelector('.kind').textContent, r.cells[4].textContent])"
    )
    answers = [seq for seq, _, tokens in rows if tokens.startswith("+")]  # saves that added tokens
    assert [seq for mark, seq, _, _ in marks if mark == "turn"] == answers and len(answers) == 2
    crashes = [seq for mark, seq, _, _ in marks if mark == "crash"]
    assert crashes == [seq for seq, kind, _ in rows if kind == "reconcile"] and crashes
    settled = [(how, text) for mark, _, how, text in marks if mark == "settled"]
    assert ("probed", next(text for how, text in settled if how == "probed")) in settled
    assert any(text.startswith("save 4: call toolu_inv (send_invoice):") for how, text in settled if how == "probed")
    heights = browser.execute(
        "return [...document.querySelectorAll('#strip [data-mark=turn]')].map(b => Number(b.getAttribute('height')))"
    )
    assert max(heights) == 46 and all(height >= 1 for height in heights)  # the largest turn fills the bar
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.execute("window.scrollTo(0, document.querySelector('#strip').getBoundingClientRect().top + scrollY - 110)")
    browser.screenshot(IMAGES / "ui-strip.png")
