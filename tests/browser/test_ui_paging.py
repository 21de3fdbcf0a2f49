"""The inspector pages a long run and a long run list from the store (``unbroken.paging``,
``store.runs_page``): what it shows is what the whole-run readers give, page by page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ui_server import request, start_server

from unbroken import ScriptedModel, open_store
from unbroken.codec import encode_full
from unbroken.runner import Agent
from unbroken.state import Phase, RunState
from unbroken.tools import tool

TURNS = 160


@tool(effect="read_only")
def lookup(n: int) -> str:
    """Look a number up."""
    return f"result {n}"


def long_run(url: str) -> None:
    answers: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": f"c{i}", "name": "lookup", "input": {"n": i}}], "usage": {}}
        for i in range(TURNS)
    ]
    answers.append({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}})
    with open_store(url) as store:
        Agent(ScriptedModel(answers), [lookup], store, max_turns=TURNS + 1).run("count", run_id="long")


def test_the_run_page_and_its_earlier_pages_are_the_whole_run_in_slices(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    long_run(url)
    with open_store(url) as store:
        decoded = store.decode("long")
    history, messages = decoded.timeline, decoded.state.messages
    server = start_server(url, actions=False)
    try:
        status, run = request(server, "GET", "/api/runs/long")
        assert status == 200 and run["timeline_count"] == len(history) > 200
        shown = run["timeline"]
        assert [row["seq"] for row in shown] == [info.seq for info in history[-200:]]
        assert [row["tokens"] for row in shown] == [info.tokens_used for info in history[-200:]]
        assert run["message_count"] == len(messages) and len(run["messages"]) == 100
        assert [m["index"] for m in run["messages"]] == list(range(len(messages) - 100, len(messages)))
        seen = [row["seq"] for row in shown]
        while seen[0] > 1:
            status, page = request(server, "GET", f"/api/runs/long/timeline?before={seen[0]}")
            assert status == 200 and page["timeline"]
            seen = [row["seq"] for row in page["timeline"]] + seen
        assert seen == [info.seq for info in history]
        start, indexes = run["messages"][0]["index"], [m["index"] for m in run["messages"]]
        while start > 0:
            status, page = request(server, "GET", f"/api/runs/long/messages?before={start}")
            assert status == 200
            indexes = [m["index"] for m in page["messages"]] + indexes
            start = page["start"]
        assert indexes == list(range(len(messages)))
    finally:
        server.stop()


def test_the_runs_list_pages_with_its_cursor_and_a_filter_scans_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        for n in range(25):
            phase: Phase = "paused" if n % 10 == 3 else "completed"
            state = RunState(run_id=f"run-{n:02d}", task=f"ticket {n}", phase=phase, save_seq=1, updated_at=1000.0 + n)
            store.append(encode_full(state, "start"), expect_seq=0)
    server = start_server(url, actions=False)
    try:
        listed, after = [], ""
        while True:
            status, page = request(server, "GET", f"/api/runs?limit=7{after}")
            assert status == 200 and len(page["runs"]) <= 7
            listed += [run["run_id"] for run in page["runs"]]
            if page["next"] is None:
                break
            after = f"&after={page['next']}"
        assert listed == [f"run-{n:02d}" for n in reversed(range(25))]  # newest first, each once
        status, paused = request(server, "GET", "/api/runs?phase=paused&limit=2")
        assert [run["run_id"] for run in paused["runs"]] == ["run-23", "run-13"] and paused["next"]
        status, rest = request(server, "GET", f"/api/runs?phase=paused&limit=2&after={paused['next']}")
        assert [run["run_id"] for run in rest["runs"]] == ["run-03"] and rest["next"] is None
    finally:
        server.stop()


def test_damage_in_old_records_shows_when_a_page_reaches_it(tmp_path: Path) -> None:
    """The run page reads the tail and shows the run; paging back to the damaged record switches
    the page to the whole-run read, which shows the problem and stops at the last intact save."""
    import threading

    from unbroken.codec import EncodedSave, loads, summary_of
    from unbroken.ui.views import RunDetails, run_page, timeline_before

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    long_run(url)
    with open_store(url) as store:
        records = store.read_records("long")
        summary = summary_of(store.decode("long").state)
        saves = []
        for record in records:
            body = record.body if isinstance(record.body, str) else record.body.decode()
            check = "00000000" if record.seq == 5 else record.checksum
            snapshot = loads(body).get("snapshot") is True
            saves.append(EncodedSave("long", record.seq, "x", body, check, snapshot, summary))
        store.backend.replace_records("long", saves, expect_seq=records[-1].seq, fence=None)
        details = RunDetails(store, threading.RLock())
        page = run_page(details, "long")
        assert page["problem"] is None and page["turns"] == TURNS + 1 and len(page["timeline"]) == 200
        seen = page["timeline"][0]["seq"]
        while True:
            earlier = timeline_before(details, "long", seen, None)["timeline"]
            if not earlier:
                break
            seen = earlier[0]["seq"]
        assert seen == 1
        page = run_page(details, "long")  # read whole now: the damage is on the page
        assert page["problem"] is not None and "save record 5 of run 'long' is damaged" in page["problem"]
        assert page["timeline"][-1]["seq"] == 4


def test_the_run_page_shows_the_newest_ledger_entries_and_pages_back_to_the_whole_ledger(tmp_path: Path) -> None:
    from urllib.parse import quote

    from webdriver import Browser

    from unbroken.testing.contract._support import ledger_entry

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        state = RunState(run_id="effects", task="many calls", phase="completed", save_seq=1, updated_at=1000.0)
        store.append(encode_full(state, "start"), expect_seq=0)
        for n in range(250):  # ties of created_at, ordered by key
            store.ledger_claim(ledger_entry("effects", f"call_{n:03d}", created_at=1000.0 + n // 3))
        whole = [entry.to_json() for entry in store.ledger_list("effects")]
    server = start_server(url, actions=False)
    try:
        status, run = request(server, "GET", "/api/runs/effects")
        assert status == 200 and run["ledger"] == whole[-100:] and run["ledger_earlier"] is True
        shown = run["ledger"]
        while True:
            oldest = shown[0]
            query = f"at={oldest['created_at']!r}&key={quote(oldest['key'])}"
            status, page = request(server, "GET", f"/api/runs/effects/ledger?{query}")
            assert status == 200 and len(page["ledger"]) <= 100
            shown = page["ledger"] + shown
            if not page["earlier"]:
                break
        assert shown == whole
        status, bad = request(server, "GET", "/api/runs/effects/ledger?at=nan")
        assert status == 400 and "bad request" in bad["error"]

        browser = Browser()
        try:
            browser.get(f"{server.base}/runs/effects")
            browser.wait("#ledger")
            rows = "document.querySelectorAll('#ledger tbody tr').length"
            assert browser.wait_until(rows) == 100
            browser.click("#earlier-effects")
            assert browser.wait_until(f"{rows} === 200 && {rows}") == 200
            browser.click("#earlier-effects")
            assert browser.wait_until(f"{rows} === 250 && {rows}") == 250
            assert browser.find_all("#earlier-effects") == []
            keys = browser.execute("return [...document.querySelectorAll('#ledger tbody tr')].map(r => r.dataset.key)")
            assert keys == [entry["key"] for entry in whole]
        finally:
            browser.quit()
    finally:
        server.stop()
