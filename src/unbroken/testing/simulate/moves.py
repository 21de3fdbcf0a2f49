"""The "record moved" fault: a stored save record copied over another place, as a store bug (an
off-by-one position, a key built for the wrong run) or a hand edit would leave it: over the next
save of its own run (``seq``), or over the save at the same seq of another run (``run``). The
bytes are intact (their checksum matches): only the record's place is wrong.

The documented outcome (docs/format.md, "Reading"): the run it landed in is damage, refused with
``CorruptCheckpoint``; no load folds a record that is not its run's own at that place. The
invariant ``moves_detected`` (``invariants``) checks each move the world made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...codec import EncodedSave, StoredRecord
from ...state import RunSummary
from ...stores.backend import is_snapshot
from ...stores.base import Store

WHERE = ("seq", "run")
"""Where a copy lands: the next seq of its run, or the same seq of another run."""


@dataclass(frozen=True)
class Move:
    """A record the world copied over another one: where it landed and what it is."""

    run_id: str
    seq: int
    checksum: str
    source: str
    """Where it came from (``run seq N``), for the report."""

    def __str__(self) -> str:
        return f"save {self.seq} of {self.run_id} overwritten by a copy of {self.source}"


def move_record(store: Store, run_ids: Sequence[str], index: int, where: str) -> Move | None:
    """Copy record number ``index`` (of all the runs' stored records, wrapping) over the place
    ``where`` names, behind the store's back (its backend's ``replace_records``, unfenced, so
    the head stays). None when there is no such place, or it holds the same bytes already."""
    backend = store.backend
    stored = {run_id: backend.records_after(run_id, 0) for run_id in run_ids}
    every = [(run_id, record) for run_id in run_ids for record in stored[run_id]]
    if not every:
        return None
    source_run, record = every[index % len(every)]
    if where == "seq":
        target_run, seq = source_run, record.seq + 1
    else:
        after = list(run_ids[run_ids.index(source_run) + 1 :]) + list(run_ids[: run_ids.index(source_run)])
        holding = [run_id for run_id in after if any(r.seq == record.seq for r in stored[run_id])]
        if not holding:
            return None
        target_run, seq = holding[0], record.seq
    records = stored[target_run]
    if not any(r.seq == seq and r.checksum != record.checksum for r in records):
        return None
    head = backend.read_head(target_run)
    summary = next((s for s in backend.list_summaries() if s.run_id == target_run), None)
    if head is None or summary is None:
        return None
    saves = [_as_save(target_run, record if r.seq == seq else r, r.seq, summary) for r in records]
    backend.replace_records(target_run, saves, expect_seq=head.seq, fence=None)
    return Move(target_run, seq, record.checksum, f"{source_run} save {record.seq}")


def _as_save(run_id: str, record: StoredRecord, seq: int, summary: RunSummary) -> EncodedSave:
    text = record.body.decode() if isinstance(record.body, bytes) else record.body
    return EncodedSave(run_id, seq, "moved", text, record.checksum, is_snapshot(text), summary)
