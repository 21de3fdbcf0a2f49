"""The contract on paged reads (issue 16): a range of records, the snapshot at or before a seq,
run summaries a page at a time, and a run's ledger entries a page at a time (newest first).

``records_between(run, after, upto)`` returns exactly the records with after < seq <= upto
(verbatim, in seq order), whatever the range: empty, reversed, past the head, across a store's
packed segments, after a rewrite, after the run is deleted. ``snapshot_seq(run, upto)`` names
the newest snapshot at or before ``upto``. ``summaries_page(after, limit)`` pages through the
runs most recently updated first, ties broken by run id (descending); the pages, concatenated,
are the whole sorted listing. A run saved between two pages moves ahead of the cursor: later
pages do not show it again (the listing is not a snapshot; a run whose ``updated_at`` went back,
as a rewrite with an older summary can do, could show up twice)."""

from __future__ import annotations

from ...codec import Encoder, StoredRecord, checksum, encode_full
from ...state import LedgerEntry, RunSummary
from ...stores.base import Store
from ._base import ContractBase
from ._support import RunWriter, ledger_entry

LONG_RUN = 300
"""Saves in the long run: enough for the stores that pack old records (file, S3) to have done so."""


def _long_run(store: Store, run_id: str) -> dict[int, tuple[str, str]]:
    run = RunWriter(store, run_id, snapshot_every=16)
    written = [run.turn(step) for step in range(1, LONG_RUN + 1)]
    return {save.seq: (save.body_bytes().decode(), save.checksum) for save in written}


def _rows(records: list[StoredRecord]) -> list[tuple[int, str, str]]:
    return [(r.seq, r.body.decode() if isinstance(r.body, bytes) else r.body, r.checksum) for r in records]


def _expected(written: dict[int, tuple[str, str]], after: int, upto: int) -> list[tuple[int, str, str]]:
    return [(seq, *written[seq]) for seq in sorted(written) if after < seq <= upto]


def _key(row: RunSummary) -> tuple[float, str]:
    return row.updated_at, row.run_id


def _all_pages(store: Store, limit: int) -> list[RunSummary]:
    pages: list[RunSummary] = []
    cursor: tuple[float, str] | None = None
    for _ in range(1000):
        page = store.runs_page(cursor, limit)
        assert len(page) <= limit
        if not page:
            return pages
        pages += page
        cursor = _key(page[-1])
    raise AssertionError("summaries_page never reached an empty page")


class PagingContract(ContractBase):
    """``records_between``, ``snapshot_seq(upto)`` and ``summaries_page`` read exactly their range."""

    def test_records_between_returns_exactly_the_range_verbatim_for_any_bounds(self, store: Store) -> None:
        written = _long_run(store, "run-range")
        bounds = [(0, 0), (0, 1), (0, 16), (5, 5), (9, 4), (15, 17), (63, 65), (127, 129), (200, 260)]
        bounds += [(255, 257), (250, 300), (0, LONG_RUN), (299, 300), (300, 300), (300, 400), (350, 400)]
        bounds += [(0, 10_000), (-5, 3)]

        for after, upto in bounds:
            got = _rows(store.records_in("run-range", after, upto))
            assert got == _expected(written, after, upto), (after, upto)

    def test_records_between_around_a_lost_record_returns_the_others_verbatim(self, store: Store) -> None:
        run = RunWriter(store, "run-lost")
        written = {
            save.seq: (save.body_bytes().decode(), save.checksum) for save in (run.turn(step) for step in range(1, 13))
        }
        self.delete_record(store, "run-lost", 7)

        for after, upto in [(0, 12), (3, 10), (6, 8), (7, 9), (8, 10), (10, 20), (6, 7)]:
            got = _rows(store.records_in("run-lost", after, upto))
            others = [row for row in _expected(written, after, upto) if row[0] != 7]
            assert [row for row in got if row[0] != 7] == others, (after, upto)
            # The lost record is left out, or comes back as damage (a checksum that fails).
            assert all(checksum(body) != check for seq, body, check in got if seq == 7), (after, upto)

    def test_records_between_of_an_unknown_run_is_empty(self, store: Store) -> None:
        assert store.records_in("run-never-saved", 0, 100) == []

    def test_records_between_after_a_rewrite_sees_only_the_new_records(self, store: Store) -> None:
        run = RunWriter(store, "run-rewritten", snapshot_every=4)
        for step in range(1, 11):
            run.turn(step)
        state = store.load("run-rewritten")
        state.save_seq = 11
        compacted = encode_full(state, "compacted")
        store.rewrite("run-rewritten", [compacted], expect_seq=10)
        run.encoder = Encoder(snapshot_every=50)
        run.encoder.prime(state)
        run.state = state
        later = [run.turn(12), run.turn(13)]

        assert store.records_in("run-rewritten", 0, 10) == []
        assert _rows(store.records_in("run-rewritten", 0, 11)) == [(11, compacted.body, compacted.checksum)]
        assert [r.seq for r in store.records_in("run-rewritten", 10, 12)] == [11, 12]
        assert _rows(store.records_in("run-rewritten", 11, 99)) == [(s.seq, s.body, s.checksum) for s in later]
        assert store.newest_snapshot("run-rewritten", 10) == 0  # the old snapshots went with the rewrite
        assert store.newest_snapshot("run-rewritten", 13) == 11

    def test_a_deleted_run_has_no_records_snapshot_or_summary(self, store: Store) -> None:
        _long_snapshots(store, "run-doomed")
        RunWriter(store, "run-kept").turn(1)
        store.delete_run("run-doomed")

        assert store.records_in("run-doomed", 0, 100) == []
        assert store.newest_snapshot("run-doomed", 5) == 0 and store.newest_snapshot("run-doomed") == 0
        assert [row.run_id for row in _all_pages(store, 10)] == ["run-kept"]

    def test_snapshot_seq_upto_is_the_newest_snapshot_at_or_before_it(self, store: Store) -> None:
        flags = _long_snapshots(store, "run-snapshots")
        snapshots = [seq for seq, snapshot in enumerate(flags, start=1) if snapshot]
        assert len(snapshots) >= 4 and snapshots[0] == 1 and not flags[-1]  # the run is what the test needs

        for upto in range(len(flags) + 3):
            expected = max((seq for seq in snapshots if seq <= upto), default=0)
            assert store.newest_snapshot("run-snapshots", upto) == expected, upto
        assert store.newest_snapshot("run-snapshots") == snapshots[-1]
        assert store.newest_snapshot("run-never-saved", 5) == 0

    def test_summaries_pages_concatenated_are_the_whole_listing_with_ties_by_run_id(self, store: Store) -> None:
        for number in range(23):  # updated_at is 1000 + its number of saves: three runs of ties
            run = RunWriter(store, f"run-page-{number:02d}")
            for step in range(1 + number % 3):
                run.turn(step)
        listing = sorted(store.backend.list_summaries(), key=_key, reverse=True)
        assert len({row.updated_at for row in listing}) == 3

        for limit in (1, 4, 7, 23, 50):
            pages = _all_pages(store, limit)
            assert [_key(row) for row in pages] == [_key(row) for row in listing], limit
            assert pages == listing
        assert store.runs_page(None, 0) == []
        assert store.runs_page(_key(listing[-1]), 5) == []
        middle = listing[10]
        assert store.runs_page(_key(middle), 3) == listing[11:14]
        # A cursor need not name a stored run: the page starts strictly after its position.
        assert store.runs_page((middle.updated_at, middle.run_id + "~"), 2) == listing[10:12]

    def test_a_run_saved_between_two_pages_is_not_shown_again_by_later_pages(self, store: Store) -> None:
        writers = {}
        for number in range(6):
            writers[number] = RunWriter(store, f"run-moving-{number}")
            writers[number].state.updated_at += number  # distinct times: run 5 is the newest
            writers[number].turn(1)
        first = store.runs_page(None, 2)
        assert [row.run_id for row in first] == ["run-moving-5", "run-moving-4"]

        writers[1].state.updated_at += 100  # run 1 is saved again: it moves ahead of the cursor
        writers[1].turn(2)
        rest = _all_pages_after(store, _key(first[-1]), 2)

        assert [row.run_id for row in rest] == ["run-moving-3", "run-moving-2", "run-moving-0"]
        assert store.runs_page(None, 1)[0].run_id == "run-moving-1"

    def test_ledger_pages_newest_first_concatenated_are_the_whole_ledger_reversed(self, store: Store) -> None:
        for number in range(23):  # created_at: four groups of ties, broken by key
            store.ledger_claim(ledger_entry("run-ledger", f"call_{number:02d}", created_at=1000.0 + number % 4))
        store.ledger_claim(ledger_entry("run-other", "call_x", created_at=5000.0))
        whole = list(reversed(store.ledger_list("run-ledger")))
        assert len(whole) == 23
        for limit in (1, 4, 7, 23, 50):
            pages: list[LedgerEntry] = []
            cursor: tuple[float, str] | None = None
            while page := store.ledger_page("run-ledger", before=cursor, limit=limit):
                assert len(page) <= limit
                pages += page
                cursor = (page[-1].created_at, page[-1].key)
            assert pages == whole, limit
        middle = whole[10]
        assert store.ledger_page("run-ledger", before=(middle.created_at, middle.key), limit=3) == whole[11:14]
        # A cursor need not name a stored entry: the page starts strictly after its position.
        assert store.ledger_page("run-ledger", before=(middle.created_at, middle.key + "~"), limit=2) == whole[10:12]
        assert store.ledger_page("run-ledger", limit=0) == []
        assert store.ledger_page("run-never-saved", limit=5) == []


def _all_pages_after(store: Store, cursor: tuple[float, str], limit: int) -> list[RunSummary]:
    rows: list[RunSummary] = []
    while page := store.runs_page(cursor, limit):
        rows += page
        cursor = _key(page[-1])
    return rows


def _long_snapshots(store: Store, run_id: str) -> list[bool]:
    """Twenty saves, snapshots every 5th and a forced one at 12; their snapshot flags."""
    run = RunWriter(store, run_id, snapshot_every=5)
    for step in range(1, 21):
        run.state.messages.append({"role": "user", "content": f"m{step}"})
        run.state.turns = step
        run.save(force_snapshot=step == 12)
    return [info.snapshot for info in store.history(run_id)]
