"""The paged readers (``unbroken.paging``) give what the whole-run readers give, reading a page.

Real stores (SQLite and the file store); the whole-run readers (``Store.decode``,
``Store.history``, ``ops.export_run``) are the reference. Bounded reads are shown by counting the
records a store hands over, and by damaging old records: a page that does not read them works,
the whole-run readers report them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_window import Recorder, compactor, lookup, script

from unbroken import Agent, CorruptCheckpoint, ModelCallFailed, ScriptedModel, open_store, ops, paging
from unbroken.codec import StoredRecord
from unbroken.state import TERMINAL_PHASES
from unbroken.stores.base import Store

TURNS = 120


@pytest.fixture(params=["sqlite", "files"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else f"file://{tmp_path / 'runs'}"


@contextlib.contextmanager
def opened(url: str) -> Iterator[Store]:
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def long_run(store: Store, run_id: str = "r", turns: int = TURNS, *, compacted: bool = False) -> None:
    model = Recorder(script(turns)) if compacted else ScriptedModel(script(turns))
    agent = Agent(model, [lookup], store, max_turns=turns + 1, compaction=compactor() if compacted else None)
    with contextlib.suppress(ModelCallFailed):
        agent.run("count", run_id=run_id)


class Counting:
    """Counts the records a store's record reads hand over."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read = 0
        for name in ("records_between", "records_after"):
            real = getattr(store.backend, name)

            def counted(*args: Any, _real: Any = real) -> list[StoredRecord]:
                records: list[StoredRecord] = _real(*args)
                self.read += len(records)
                return records

            monkeypatch.setattr(store.backend, name, counted)


def damage(store: Store, run_id: str, seq: int) -> None:
    """Flip the checksum of save record ``seq`` (as a torn write would leave it)."""
    records = store.read_records(run_id)
    head = records[-1].seq
    saves = []
    from unbroken.codec import EncodedSave, loads, summary_of

    summary = summary_of(store.decode(run_id).state)
    for record in records:
        body = record.body if isinstance(record.body, str) else record.body.decode()
        check = record.checksum if record.seq != seq else "00000000"
        snapshot = loads(body).get("snapshot") is True
        saves.append(EncodedSave(run_id, record.seq, "x", body, check, snapshot, summary))
    store.backend.replace_records(run_id, saves, expect_seq=head, fence=None)


@pytest.mark.parametrize("compacted", [False, True])
def test_the_tail_state_is_the_whole_runs_state(url: str, compacted: bool) -> None:
    with opened(url) as store:
        long_run(store, compacted=compacted)
        whole = store.decode("r")
        tail = paging.read_tail(store, "r", messages=6)
        assert tail.state.small_fields() == whole.state.small_fields()
        base = tail.message_base
        assert 0 < base <= len(whole.state.messages) - 6
        assert tail.state.messages[base:] == whole.state.messages[base:]
        assert tail.state.messages[:base] == [None] * base
        assert (
            paging.tail_timeline(tail)
            == [info for info in whole.timeline if info.seq >= tail.records[0]["seq"]][
                -len(paging.tail_timeline(tail)) :
            ]
        )


def test_the_tail_reads_a_snapshots_worth_of_records(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(url) as store:
        long_run(store)
        head = store.backend.read_head("r")
        assert head is not None and head.seq > 200
        counting = Counting(store, monkeypatch)
        paging.read_tail(store, "r", messages=6)
        assert 0 < counting.read <= 60  # a snapshot every 50 records; the run has over 240


def test_timeline_pages_are_the_whole_history_in_slices(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(url) as store:
        long_run(store, compacted=True)
        whole = store.history("r")
        decoded = store.decode("r")
        starts = [record["msg_start"] for record in decoded.records]
        head = whole[-1].seq
        for first, last in [(1, 10), (37, 140), (head - 9, head), (head - 3, head + 50), (1, head)]:
            page = paging.timeline_page(store, "r", first, last)
            expected = [info for info in whole if first <= info.seq <= last]
            assert page.saves == expected and page.problem is None and page.head == head
            assert page.starts == [starts[info.seq - 1] for info in expected]
        assert [info for chunk in paging.iter_timeline(store, "r") for info in chunk] == whole
        counting = Counting(store, monkeypatch)
        paging.timeline_page(store, "r", head - 20, head)
        assert counting.read <= 21 + 50


def test_message_pages_are_the_whole_conversation_in_slices(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(url) as store:
        long_run(store)
        decoded = store.decode("r")
        messages = decoded.state.messages
        writer = {}
        for info, record in zip(decoded.timeline, decoded.records, strict=True):
            for index in range(record["msg_start"], record["msg_start"] + len(record["messages"])):
                writer[index] = info.seq
        for start, end in [(0, 5), (17, 40), (len(messages) - 3, len(messages) + 10), (100, 100)]:
            page = paging.messages_page(store, "r", start, end)
            assert page.start == start
            assert page.messages == messages[start:end]
            assert [info.seq for info in page.writers] == [writer[i] for i in range(start, min(end, len(messages)))]
        counting = Counting(store, monkeypatch)
        paging.messages_page(store, "r", 100, 120)
        # two binary searches of one-record reads (~2 x 8), the snapshot before (<= 50), the
        # records holding the 20 messages read 16, then 32 at a time; the run has 242 records
        assert counting.read <= 2 * 8 + 50 + 16 + 32


@pytest.mark.parametrize("compacted", [False, True])
def test_the_streamed_export_is_the_same_bytes_as_the_whole_one(url: str, compacted: bool) -> None:
    with opened(url) as store:
        long_run(store, compacted=compacted)
        document = ops.export_run(store, "r")
        out = io.StringIO()
        assert paging.stream_export(store, "r", out.write, exported_at=document["exported_at"]) is None
        assert out.getvalue() == json.dumps(document, ensure_ascii=False, indent=2)


def test_the_streamed_export_of_a_rewritten_run_is_the_same_bytes(url: str) -> None:
    with opened(url) as store:
        long_run(store, turns=150)
        damage(store, "r", 290)
        ops.recover(store, "r")  # the run now starts with one snapshot past save 1 (and past a page)
        assert store.read_records("r")[0].seq > paging.PAGE_RECORDS
        document = ops.export_run(store, "r")
        out = io.StringIO()
        paging.stream_export(store, "r", out.write, exported_at=document["exported_at"])
        assert out.getvalue() == json.dumps(document, ensure_ascii=False, indent=2)
        assert paging.timeline_page(store, "r", 1, 10**6).saves == store.history("r")
        before_it = paging.timeline_page(store, "r", 1, 10)  # before the run's first record: empty, not damage
        assert before_it.saves == [] and before_it.problem is None
        assert before_it.first == store.read_records("r")[0].seq


def test_damage_read_by_a_page_is_reported_as_the_whole_run_reports_it(url: str) -> None:
    with opened(url) as store:
        long_run(store, turns=60)
        head = store.history("r")[-1].seq
        damage(store, "r", head - 2)
        with pytest.raises(CorruptCheckpoint) as whole:
            store.decode("r")
        with pytest.raises(CorruptCheckpoint) as tail:
            paging.read_tail(store, "r", messages=6)  # reads back past record head - 2
        assert str(tail.value) == str(whole.value)
        shown = paging.read_tail(store, "r", messages=6, recover=True)
        assert shown.problem == store.decode("r", recover=True).problem and shown.problem
        page = paging.timeline_page(store, "r", head - 10, head)
        assert page.problem == shown.problem
        assert page.saves == [info for info in store.history("r") if info.seq >= head - 10]
        document = ops.export_run(store, "r")
        out = io.StringIO()
        damaged = paging.stream_export(store, "r", out.write, exported_at=document["exported_at"])
        assert damaged == document["damaged"] and damaged
        assert out.getvalue() == json.dumps(document, ensure_ascii=False, indent=2)


def test_damage_in_old_records_leaves_the_newest_page_readable(url: str) -> None:
    """The documented behaviour: a page judges the records it reads. The whole-run readers still
    report the damage (store.load, export, history --all); the tail and the newest page do not
    read record 3 and show the run."""
    with opened(url) as store:
        long_run(store)
        whole = store.decode("r")
        head = whole.last_seq
        damage(store, "r", 3)
        with pytest.raises(CorruptCheckpoint, match="save record 3 of run 'r' is damaged"):
            store.load("r")
        tail = paging.read_tail(store, "r", messages=6)
        assert tail.problem is None and tail.state.small_fields() == whole.state.small_fields()
        page = paging.timeline_page(store, "r", head - 20, head)
        assert page.problem is None and page.saves == [info for info in whole.timeline if info.seq >= head - 20]
        out = io.StringIO()
        assert "save record 3" in str(paging.stream_export(store, "r", out.write))
        with pytest.raises(paging.Unusual):
            list(paging.iter_timeline(store, "r"))


def test_a_missing_tail_is_reported_as_the_whole_run_reports_it(tmp_path: Path) -> None:
    with opened(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        long_run(store, turns=20)
        head = store.backend.read_head("r")
        assert head is not None
        with sqlite3.connect(tmp_path / "runs.db") as conn:  # as another process, or a lost write, would
            conn.execute("DELETE FROM unbroken_records WHERE run_id='r' AND seq=?", (head.seq,))
        conn.close()
        with pytest.raises(CorruptCheckpoint) as whole:
            store.decode("r")
        with pytest.raises(CorruptCheckpoint) as tail:
            paging.read_tail(store, "r")
        assert str(tail.value) == str(whole.value) and "missing" in str(whole.value)


def test_approvals_and_show_read_the_tail(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(url) as store:
        long_run(store)
        head = store.backend.read_head("r")
        assert head is not None
        counting = Counting(store, monkeypatch)
        assert ops.pending_approvals(store, "r") == []
        view = ops.inspect_run(store, "r", messages=6)
        assert view.state is not None and view.state.turns == TURNS + 1
        assert counting.read <= 2 * 60


def test_the_streamed_export_writes_every_json_value_as_json_dumps_does(url: str) -> None:
    """Floats in every notation, non-ASCII text, escapes, empty and deeply nested containers."""
    from unbroken.codec import Encoder
    from unbroken.state import RunState

    deep: Any = "bottom"
    for _ in range(150):
        deep = [deep]
    odd = {"tiny": 2.5e-05, "big": 1e16, "huge": 1.7976931348623157e308, "least": 5e-324, "zero": -0.0,
           "small": [1.5e-07, 1e-10, 0.0001, 0.00012, -2.5e-05, [2.5e-05]],
           "large": [1.5e17, 9.999999999999999e15, 1e22], "deep": deep, "n": -(2**63)}  # fmt: skip
    plain = {"floats": [0.5, 100.0, 1e15, 123456789.123, 0.0001, 0.00012, -0.0, 123456789012345.6],
             "text": "é \u2028 \x7f \x1f \"q\" \\ /", "empty": [{}, []], "n": 2**64 - 1}  # fmt: skip
    with opened(url) as store:
        state = RunState(run_id="odd", task="odd values", business_state={"odd": odd, "plain": plain})
        encoder = Encoder(snapshot_every=3)
        for seq in range(1, 8):  # odd values (the stdlib encoder writes them), then plain ones (orjson)
            state.save_seq = seq
            state.messages.append({"role": "user", "content": f"turn {seq}", "values": odd if seq % 2 else plain})
            encoded = encoder.encode(state, "turn")
            store.append(encoded, expect_seq=seq - 1)
            encoder.committed(state, encoded)
        document = ops.export_run(store, "odd")
        out = io.StringIO()
        paging.stream_export(store, "odd", out.write, exported_at=document["exported_at"])
        assert out.getvalue() == json.dumps(document, ensure_ascii=False, indent=2)


@pytest.mark.parametrize("golden", ["run-1", "run-2", "run-mixed"])
def test_golden_runs_of_every_schema_read_the_same_paged(url: str, golden: str) -> None:
    """Records as schema 1 wrote them, schema 2, and a schema 1 run continued at schema 2."""
    from unbroken.codec import EncodedSave, decode, summary_of

    here = Path(__file__).resolve().parents[1] / "golden" / golden
    bodies = here.joinpath("records.jsonl").read_bytes().split(b"\n")[:-1]
    index = [line.split() for line in here.joinpath("index.txt").read_text(encoding="utf-8").splitlines()]
    records = [StoredRecord(int(seq), body, check) for (seq, check, _, _), body in zip(index, bodies, strict=True)]
    run_id = json.loads(bodies[0])["fields"]["run_id"]
    summary = summary_of(decode(run_id, records).state)
    saves = [
        EncodedSave(run_id, record.seq, label, body.decode(), record.checksum, kind == "snapshot", summary)
        for record, body, (_, _, kind, label) in zip(records, bodies, index, strict=True)
    ]
    with opened(url) as store:
        store.backend.replace_records(run_id, saves, expect_seq=0, fence=None)
        whole = store.decode(run_id)
        tail = paging.read_tail(store, run_id, messages=2)
        assert tail.state.small_fields() == whole.state.small_fields()
        assert tail.state.messages[tail.message_base :] == whole.state.messages[tail.message_base :]
        head = whole.last_seq
        assert paging.timeline_page(store, run_id, 1, head).saves == whole.timeline
        assert paging.timeline_page(store, run_id, head - 2, head).saves == whole.timeline[-3:]
        page = paging.messages_page(store, run_id, 1, 4)
        assert page.messages == whole.state.messages[1:4]
        document = ops.export_run(store, run_id)
        out = io.StringIO()
        paging.stream_export(store, run_id, out.write, exported_at=document["exported_at"])
        assert out.getvalue() == json.dumps(document, ensure_ascii=False, indent=2)


def test_the_fast_writer_is_used_only_where_it_writes_what_json_dumps_writes() -> None:
    """orjson writes the export's items unless its text may differ from the stdlib's: over 20,000
    floats of every magnitude, each it is trusted with is written identically."""
    import random

    import orjson

    draw = random.Random(16)
    trusted = 0
    for _ in range(20_000):
        x = draw.choice([draw.random(), -draw.random(), float(draw.randint(-(10**6), 10**6))])
        x *= 10.0 ** draw.randint(-30, 30)
        value = {"at": x, "values": [x, str(x)]}
        data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        if not paging._risky(data):
            trusted += 1
            assert data.decode() == json.dumps(value, ensure_ascii=False, indent=2)
        assert paging._text(value, 0) == json.dumps(value, ensure_ascii=False, indent=2)
    assert trusted > 5_000


class Whole:
    """Counts what a store's record, summary and ledger reads hand over, whole reads apart."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records = self.summaries = self.entries = 0
        self.whole: list[str] = []
        for name in ("records_between", "records_after", "summaries_page", "entries_page"):
            real = getattr(store.backend, name)

            def counted(*args: Any, _real: Any = real, _name: str = name) -> list[Any]:
                rows: list[Any] = _real(*args)
                if _name.startswith("records"):
                    self.records += len(rows)
                elif _name == "summaries_page":
                    self.summaries += len(rows)
                else:
                    self.entries += len(rows)
                return rows

            monkeypatch.setattr(store.backend, name, counted)
        # The loader's whole-run reads (Store's, over the backend's fast path if it has one),
        # and the backend's whole listings.
        for owner, name in (
            (store, "iter_raw_records"),
            (store, "read_raw_records"),
            (store.backend, "list_summaries"),
            (store.backend, "list_entries"),
        ):
            real = getattr(owner, name)

            def noted(*args: Any, _real: Any = real, _name: str = name) -> Any:
                self.whole.append(_name)
                return _real(*args)

            monkeypatch.setattr(owner, name, noted)


def test_watch_starts_from_the_tail_and_gives_the_whole_readers_save_points(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with opened(url) as store:
        long_run(store)
        whole = store.history("r")
        everything = list(ops.follow(store, "r", interval=0, timeout=0, history=None))
        assert [update.saves for update in everything] == [whole]
        phase = store.load("r").phase
        reads = Whole(store, monkeypatch)
        (first,) = ops.follow(store, "r", interval=0, timeout=0, history=20)
        assert first.saves == whole[-20:] and first.phase == phase
        assert reads.whole == ["list_entries"]  # the ledger is read whole (its changes are followed)
        assert 0 < reads.records <= 20 + 2 * 50  # the page and the tail: a snapshot every 50 records


def test_runs_pages_are_the_whole_listing_in_slices(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(url) as store:
        for number in range(23):
            Agent(ScriptedModel(script(0)), [lookup], store, max_turns=2).run("t", run_id=f"run-{number:02d}")
        whole = ops.list_all_runs(store)
        pages: list[Any] = []
        for page in ops.iter_runs(store, page=5):
            assert len(page.runs) <= 5
            pages += page.runs
        assert pages == sorted(whole, key=lambda row: (row.updated_at, row.run_id), reverse=True)  # type: ignore[union-attr]
        reads = Whole(store, monkeypatch)
        page = ops.runs_page(store, limit=7)
        assert page.runs == pages[:7] and page.next == (pages[6].updated_at, pages[6].run_id)
        assert reads.summaries == 8  # the page and one row to know a next page exists
        assert "list_summaries" not in reads.whole or url.startswith("file")  # the file store's summaries_page
        after = ops.runs_page(store, limit=30, after=page.next)
        assert after.runs == pages[7:] and after.next is None and after.queued == []


def test_ledger_pages_are_the_whole_ledger_in_slices_and_read_a_page_on_sqlite(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unbroken.testing.contract._support import ledger_entry

    with opened(url) as store:
        long_run(store, turns=3)
        for number in range(250):
            store.ledger_claim(ledger_entry("r", f"call_{number:03d}", created_at=1000.0 + number // 3))
        whole = store.ledger_list("r")
        listed = next(row for row in store.list_runs() if row.run_id == "r")  # what ledger_of read before
        view = ops.ledger_of(store, "r", last=40)
        assert view.entries == whole[-40:] and view.earlier
        assert view.run_finished == (listed.phase in TERMINAL_PHASES)
        earlier = ops.ledger_before(store, "r", (view.entries[0].created_at, view.entries[0].key), 200)
        assert earlier == whole[-240:-40]
        assert ops.ledger_of(store, "r").entries == whole and not ops.ledger_of(store, "r").earlier
        assert ops.ledger_of(store, "r", last=250).entries == whole and not ops.ledger_of(store, "r", last=250).earlier
        reads = Whole(store, monkeypatch)
        ops.ledger_of(store, "r", last=40)
        inspected = ops.inspect_run(store, "r", messages=6, ledger=40)
        assert inspected.ledger == whole[-40:] and inspected.ledger_earlier
        if url.startswith("sqlite"):  # an index by creation time: the page only
            assert reads.whole == [] and reads.entries == 2 * 41
        else:  # the file store reads every entry (documented)
            assert set(reads.whole) == {"list_entries"}
