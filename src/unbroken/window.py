"""Resume a compacted run from its tail: constant time and memory, however long the run.

With compaction on, the model is only ever sent the task, the summary and the recent window
``state.messages[state.summary_upto:]``. A resume therefore needs only the small fields (the
newest snapshot record and the deltas after it) and the records that hold the window; it never
needs to read, parse or hold the older history, which stays on disk, checksummed, for
``store.load``, ``unbroken history`` and export.

``load_window`` reads the last records of the run (``Store.head_of`` + ``Store.records_since``),
widening the read until it holds a snapshot and the start of the window. The state it returns
has the run's true message count, with ``None`` in place of each message before the window
(``Decoded.message_base`` says where the loaded ones begin). Anything unusual (a run that was
never compacted, damage, a record from an older schema, a missing tail) goes to the careful
whole-run ``Store.decode``, which judges it exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .acceptance import RunRecords, accept_fields
from .codec import (
    MIGRATIONS,
    Decoded,
    Migrations,
    StoredRecord,
    fold_fields,
    is_snapshot,
    reads_natively,
)
from .errors import EncryptionKeyMissing
from .state import JSONValue, RunState

if TYPE_CHECKING:
    from .stores.base import Store

FIRST_SPAN = 128
"""Records read from the end at first: a snapshot is written every 50 records by default and
the window of a compacted run spans a few dozen turns."""
MAX_SPAN = 65_536
"""Past this many records the careful whole-run read is as good."""

Verdict = Decoded | Literal["earlier", "whole"]


def load_window(store: Store, run_id: str, *, migrations: Migrations = MIGRATIONS) -> Decoded:
    """The run's state at its last save point, reading only its tail when it was compacted.
    Raises like ``Store.decode`` (``RunNotFound``, ``CorruptCheckpoint``, ``IncompatibleSchema``).
    For resuming: ``Decoded.records`` holds the records read from the tail, and is empty when the
    whole run was read (each record is let go once folded); ``Store.decode`` gives the timeline."""
    head = store.head_of(run_id)
    if head is not None and head.seq > FIRST_SPAN:
        span = _first_span(store, run_id, head.seq)
        while span <= MAX_SPAN:
            verdict = decode_window(run_id, store.records_since(run_id, max(0, head.seq - span)), head.seq, migrations)
            if isinstance(verdict, Decoded):
                return verdict
            if verdict == "whole" or span >= head.seq:
                break
            span = max(span * 4, FIRST_SPAN)
    return store.decode(run_id, migrations=migrations, keep_records=False)


def _first_span(store: Store, run_id: str, head_seq: int) -> int:
    """How many records to read first: those from the newest snapshot to the head, when the
    backend finds that snapshot without reading the run (every shipped backend does). They are
    the fewest that hold the current small fields, which say whether the run was ever compacted:
    a run that never was (the common long run) is sent to the whole-run decode after parsing a
    few dozen records, not 128. Otherwise ``FIRST_SPAN``."""
    if not store.indexes_snapshots:  # the fallback reads the whole run
        return FIRST_SPAN
    snapshot = store.newest_snapshot(run_id)
    if 0 < snapshot <= head_seq and head_seq - snapshot < FIRST_SPAN:
        return head_seq - snapshot + 1
    return FIRST_SPAN


def decode_window(
    run_id: str, records: list[StoredRecord], head_seq: int, migrations: Migrations = MIGRATIONS
) -> Verdict:
    """Fold the last records of a run (seq ascending, ending at ``head_seq``) into its state, if
    they hold a snapshot and the whole compaction window. ``"earlier"``: read further back;
    ``"whole"``: only the whole-run decode can judge this run (never compacted, damaged, old)."""
    if not records or records[-1].seq != head_seq:
        return "whole"
    parsed = _parse(run_id, records, migrations)
    if parsed is None:
        return "whole"
    snapshots = [index for index, record in enumerate(parsed) if is_snapshot(record)]
    if not snapshots:
        return "earlier"
    fields: dict[str, Any] | None = None
    try:
        for record in parsed[snapshots[0] :]:
            fields = fold_fields(fields, record)  # every format version, its fields completed
    except (KeyError, TypeError, ValueError):
        return "whole"
    assert fields is not None
    upto = fields.get("summary_upto", 0)
    if type(upto) is not int or upto <= 0:
        return "whole"  # never compacted: the window is the whole history (the packed read is faster)
    starts = [record["msg_start"] for record in parsed]
    if starts[0] > upto:
        return "earlier"
    first = max(index for index, start in enumerate(starts) if start <= upto)
    messages: list[JSONValue] = [None] * starts[first]
    for record in parsed[first:]:
        if record["msg_start"] != len(messages):
            return "whole"
        messages.extend(record["messages"])
    try:
        accept_fields(fields)
        if fields["message_count"] != len(messages) or fields["run_id"] != run_id:
            return "whole"
        state = RunState.from_parts(fields, messages)
    except (KeyError, TypeError, AttributeError, ValueError):
        return "whole"
    return Decoded(state=state, last_seq=head_seq, records=parsed[first:], message_base=starts[first])


def _parse(run_id: str, records: list[StoredRecord], migrations: Migrations) -> list[dict[str, Any]] | None:
    """The records accepted (``acceptance.RunRecords``: size, checksum under the run's rule,
    JSON, shape), in seq order, all read without migration; or None."""
    current, parsed, run = migrations.current, [], RunRecords(run_id)
    try:
        for index, record in enumerate(records):
            if record.seq != records[0].seq + index:
                return None
            value = run.accept(record.seq, record.body, record.checksum, current)
            if not reads_natively(value["v"], migrations):
                return None  # an older schema: the whole-run decode migrates it
            parsed.append(value)
    except (ValueError, EncryptionKeyMissing):  # IncompatibleSchema (newer) is not a ValueError: it propagates
        return None  # (a sealed record without keys: the whole-run decode says which key it needs)
    return parsed
