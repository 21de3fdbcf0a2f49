"""Resume a compacted run from its tail: constant time and memory, however long the run.

With compaction on, the model is only ever sent the task, the summary and the recent window
``state.messages[state.summary_upto:]``. A resume therefore needs only the small fields (the
newest snapshot record and the deltas after it) and the records that hold the window; it never
needs to read, parse or hold the older history, which stays on disk, checksummed, for
``store.load``, ``unbroken history`` and export.

``load_window`` reads the last records of the run (``Store.read_head`` + ``Store.records_after``),
widening the read until it holds a snapshot and the start of the window. The state it returns
has the run's true message count, with ``None`` in place of each message before the window
(``Decoded.message_base`` says where the loaded ones begin). Anything unusual (a run that was
never compacted, damage, a record from an older schema, a missing tail) goes to the careful
whole-run ``Store.decode``, which judges it exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .codec import (
    MAX_RECORD_BYTES,
    MIGRATIONS,
    Decoded,
    Migrations,
    StoredRecord,
    checksum,
    loads,
    validate_fields,
    validate_record,
)
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
    Raises like ``Store.decode`` (``RunNotFound``, ``CorruptCheckpoint``, ``IncompatibleSchema``)."""
    head = store.read_head(run_id)
    if head is not None and head.seq > FIRST_SPAN:
        span = FIRST_SPAN
        while span <= MAX_SPAN:
            verdict = decode_window(run_id, store.records_after(run_id, max(0, head.seq - span)), head.seq, migrations)
            if isinstance(verdict, Decoded):
                return verdict
            if verdict == "whole" or span >= head.seq:
                break
            span *= 4
    return store.decode(run_id, migrations=migrations)


def decode_window(
    run_id: str, records: list[StoredRecord], head_seq: int, migrations: Migrations = MIGRATIONS
) -> Verdict:
    """Fold the last records of a run (seq ascending, ending at ``head_seq``) into its state, if
    they hold a snapshot and the whole compaction window. ``"earlier"``: read further back;
    ``"whole"``: only the whole-run decode can judge this run (never compacted, damaged, old)."""
    if not records or records[-1].seq != head_seq:
        return "whole"
    parsed = _parse(records, migrations.current)
    if parsed is None:
        return "whole"
    snapshots = [index for index, record in enumerate(parsed) if record["snapshot"]]
    if not snapshots:
        return "earlier"
    fields: dict[str, Any] = {}
    for record in parsed[snapshots[0] :]:
        if record["snapshot"]:
            fields = dict(record["fields"])
        else:
            fields.update(record["fields"])
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
        validate_fields(fields)
        if fields["message_count"] != len(messages) or fields["run_id"] != run_id:
            return "whole"
        state = RunState.from_parts(fields, messages)
    except (KeyError, TypeError, AttributeError, ValueError):
        return "whole"
    return Decoded(state=state, last_seq=head_seq, records=parsed[first:], message_base=starts[first])


def _parse(records: list[StoredRecord], current: int) -> list[dict[str, Any]] | None:
    """The records parsed and checked (size, checksum, order, shape, current schema), or None."""
    if any(record.seq != records[0].seq + index for index, record in enumerate(records)):
        return None
    bodies = [record.body if isinstance(record.body, bytes) else record.body.encode() for record in records]
    for record, body in zip(records, bodies, strict=True):
        if len(body) > MAX_RECORD_BYTES or checksum(body) != record.checksum:
            return None
    try:
        values = loads(b"[" + b",".join(bodies) + b"]")
        for record, value in zip(records, values, strict=True):
            validate_record(value, record.seq, current)
            if value["v"] != current:
                return None  # an older schema: the whole-run decode migrates it
    except ValueError:  # IncompatibleSchema (newer) is not a ValueError: it propagates
        return None
    return values  # type: ignore[no-any-return]
