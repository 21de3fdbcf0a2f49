"""Bounded reads of a run's history: the tail state, the timeline and the messages in pages,
and a streaming export. None of them holds the whole history in memory.

Which reader returns what, and what it costs (docs/compaction.md has the full list):

* ``read_tail``: the run's state at its last save point from its newest snapshot record and the
  deltas after it (``Store.newest_snapshot`` + ``Store.records_in``), plus the records holding
  the last ``messages`` messages. ``state.messages`` has the run's true length, with ``None`` in
  place of the messages it did not read. Cost: ~``snapshot_every`` records, whatever the run's
  length. Used by ``unbroken show``, approvals (list, approve, deny), ``resolve`` and the inspector.
* ``timeline_page``: save points ``first..last``: folds from the newest snapshot at or before
  ``first``. Cost: ``last - first`` records plus up to ``snapshot_every``.
* ``messages_page``: messages ``start..end``: finds the record holding ``start`` by a binary
  search on ``msg_start`` (one-record reads), then reads forward. Cost: ~log2(saves) one-record
  reads plus the records holding the page.
* ``stream_export``: the same JSON document as ``ops.export_run``, byte for byte, written as it is
  read: two passes over the records, a page at a time (the first checks every record and writes
  the save points to a spooled temporary file; the second writes the messages). Memory: a page.

Every record read is checked as the whole-run decode checks it (size, CRC-32, JSON, shape, the
seq order, the ``msg_start`` chain, a missing tail against the run's head). A bounded reader
judges only the records it reads. Anything it cannot judge alone (a damaged or missing record, a
record from an older schema that needs migrating, fields that do not fold) is handed to the
whole-run reader (``Store.decode``), which reports it exactly as before: same result, same
``CorruptCheckpoint`` message. So damage is never skipped in what is shown; damage in records a
page does not read is reported by the readers that read them (``--all``, export, ``store.load``).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import IO, Any

import orjson

from . import clock
from .acceptance import RunRecords, accept_fields
from .codec import (
    MIGRATIONS,
    Decoded,
    Migrations,
    fold_fields,
    is_snapshot,
    reads_natively,
    save_info,
)
from .errors import CorruptCheckpoint, EncryptionKeyMissing
from .state import JSONValue, RunState, SaveInfo
from .stores.base import Store

PAGE_RECORDS = 256
"""Records asked of the store at once."""
_SAVE_FIELDS = tuple(item.name for item in dataclass_fields(SaveInfo))


class Unusual(Exception):
    """A bounded read found what only the whole-run decode judges (damage, an older schema, a
    fold that does not check out). Never escapes this module's public functions."""


Record = dict[str, Any]


def parse_record(
    run: RunRecords,
    seq: int,
    body: str | bytes,
    check: str,
    migrations: Migrations = MIGRATIONS,
    *,
    same_schema: bool = True,
) -> Record:
    """One stored record of ``run`` (its records read so far, in seq order), accepted as every
    reader accepts it (``acceptance.RunRecords``: size, CRC under the run's rule, JSON, shape);
    what it refuses is ``Unusual``, for the whole-run decode to report.
    ``same_schema``: a record from a schema read only through a migration is unusual too."""
    try:
        value = run.accept(seq, body, check, migrations.current)  # IncompatibleSchema (newer) propagates
    except ValueError as exc:
        raise Unusual(f"record {seq}: {exc}") from exc
    if same_schema and not reads_natively(value["v"], migrations):
        raise Unusual(f"record {seq} has schema {value['v']}: the whole-run decode migrates it")
    return value


def iter_records(
    store: Store,
    run_id: str,
    after: int,
    upto: int,
    *,
    migrations: Migrations = MIGRATIONS,
    same_schema: bool = True,
    leading_gap: bool = False,
    page: int = PAGE_RECORDS,
    lead: int = 0,
) -> Iterator[Record]:
    """The records ``after < seq <= upto``, parsed and checked, read ``page`` at a time (doubling
    up to ``PAGE_RECORDS``; the first read takes ``lead`` more). Raises ``Unusual`` at a damaged
    or missing record (``leading_gap``: records before the first one found may be absent, as after
    a rewrite). Stopping early reads no further pages."""
    expected: int | None = None if leading_gap else after + 1
    position, run = after, RunRecords(run_id)
    while position < upto:
        end = min(upto, position + page + lead)
        page, lead = min(PAGE_RECORDS, page * 2), 0
        records = store.records_in(run_id, position, end)
        if not records and expected is None and end < upto:
            # a run rewritten (recover, migrate) starts past 1: find its first record by a binary
            # search of one-record reads rather than reading empty pages up to it
            end = max(end, first_seq(store, run_id, upto) - 1)
        for record in records:
            if expected is not None and record.seq != expected:
                raise Unusual(f"record {expected} is missing")
            if not after < record.seq <= end:
                raise Unusual(f"record {record.seq} read outside {after + 1}..{end}")
            try:
                parsed = parse_record(
                    run, record.seq, record.body, record.checksum, migrations, same_schema=same_schema
                )
            except EncryptionKeyMissing as exc:  # a sealed record read without keys: name the key it needs
                raise store.key_missing(run_id, exc) from None
            yield parsed
            expected = record.seq + 1
        position = end
    if expected != upto + 1:
        raise Unusual(f"records up to {upto} are missing")


def fold(fields: dict[str, Any] | None, record: Record) -> dict[str, Any]:
    """The small fields after ``record`` (``codec.fold_fields``: a snapshot replaces them, a delta
    updates them, a version 2 record is completed). A new dict: ``fields`` is not changed."""
    if fields is None and not is_snapshot(record):
        raise Unusual(f"record {record['seq']} is a delta with no snapshot before it")
    try:
        return fold_fields(fields, record)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise Unusual(f"record {record['seq']} does not fold: {exc}") from exc


def _head_seq(store: Store, run_id: str) -> int:
    head = store.head_of(run_id)
    if head is None or head.seq <= 0:
        raise Unusual("no head")  # never saved, queued, or lost: the whole-run read says which
    return head.seq


def walk(
    store: Store,
    run_id: str,
    first: int,
    upto: int,
    *,
    migrations: Migrations = MIGRATIONS,
    same_schema: bool = False,
    page: int = PAGE_RECORDS,
) -> Iterator[tuple[Record, dict[str, Any]]]:
    """(record, fields folded through it) for each record ``first <= seq <= upto``, folding from
    the newest snapshot at or before ``first``; checks the ``msg_start`` chain. Raises ``Unusual``.
    ``page``: records read at first (then doubling), for a caller that may stop early."""
    start = store.newest_snapshot(run_id, upto_seq=max(1, first)) if first > 0 else 0
    fields: dict[str, Any] | None = None
    end: int | None = None
    for record in iter_records(
        store,
        run_id,
        max(0, start - 1),
        upto,
        migrations=migrations,
        same_schema=same_schema,
        leading_gap=start <= 0,
        page=page,
        lead=max(0, first - start) if start > 0 else 0,
    ):
        if fields is None and not is_snapshot(record):
            raise Unusual(f"record {record['seq']} should be a snapshot")
        if end is not None and record["msg_start"] != end:
            raise Unusual(f"record {record['seq']} starts at message {record['msg_start']}, expected {end}")
        if end is None and start <= 0 and record["msg_start"] != 0:
            raise Unusual("the first record does not start at message 0")
        end = record["msg_start"] + len(record["messages"])
        fields = fold(fields, record)
        if record["seq"] >= first:
            yield record, fields


def first_seq(store: Store, run_id: str, head: int) -> int:
    """The seq of the run's first stored record (records ``first..head`` are all stored; a
    rewrite starts them past 1): a binary search of one-record reads, ~log2(head) of them."""
    low, high = 1, head
    while low < high:
        middle = (low + high) // 2
        if store.records_in(run_id, middle - 1, middle):
            high = middle
        else:
            low = middle + 1
    return low


# --------------------------------------------------------------------------- the tail


def read_tail(
    store: Store,
    run_id: str,
    *,
    messages: int = 0,
    recover: bool = False,
    migrations: Migrations = MIGRATIONS,
) -> Decoded:
    """The run's state at its last save point, from its newest snapshot and the deltas after it,
    with at least its last ``messages`` messages loaded (``state.messages`` has the true length;
    ``None`` before ``Decoded.message_base``; ``Decoded.records`` are the records read). Raises
    and reports exactly like ``Store.decode(run_id, recover=recover)``, which it defers to for
    anything unusual (damage in the records it reads, a missing tail, an older schema, a run
    never saved)."""
    try:
        return _tail(store, run_id, messages, migrations)
    except Unusual:
        return store.decode(run_id, recover=recover, migrations=migrations)


def _tail(store: Store, run_id: str, want: int, migrations: Migrations) -> Decoded:
    head = _head_seq(store, run_id)
    snapshot = store.newest_snapshot(run_id)
    if not 0 < snapshot <= head:
        raise Unusual("no snapshot")
    records = list(iter_records(store, run_id, snapshot - 1, head, migrations=migrations))
    fields: dict[str, Any] | None = None
    end = records[0]["msg_start"]
    for record in records:
        if record["msg_start"] != end:
            raise Unusual("msg_start chain")
        end += len(record["messages"])
        fields = fold(fields, record)
    assert fields is not None
    count, base = end, records[0]["msg_start"]
    earlier: list[Record] = []
    low = snapshot - 1  # records before the snapshot, read backwards until the last ``want`` messages are in
    span = 8  # a record holds a message or two: widen the read as needed
    while base > max(0, count - want):
        after = max(0, low - span)
        span = min(PAGE_RECORDS, span * 4)
        page = list(iter_records(store, run_id, after, low, migrations=migrations, leading_gap=True))
        for record in reversed(page):
            if record["msg_start"] + len(record["messages"]) != base:
                raise Unusual("msg_start chain")
            base = record["msg_start"]
        if page[0]["seq"] != after + 1 and base > 0:
            raise Unusual("records missing before the snapshot")
        earlier = page + earlier
        low = after
    loaded: list[JSONValue] = [None] * base
    for record in earlier + records:
        loaded.extend(record["messages"])
    try:
        accept_fields(fields)
        if fields["message_count"] != count or fields["run_id"] != run_id:
            raise Unusual("fields do not match the records")
        state = RunState.from_parts(fields, loaded)  # every record read natively (no migration)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise Unusual(str(exc)) from exc
    return Decoded(state=state, last_seq=head, records=earlier + records, message_base=base)


def tail_timeline(decoded: Decoded) -> list[SaveInfo]:
    """The save points of the records ``read_tail`` read, from the first snapshot among them
    (all of them when it fell back to the whole-run decode)."""
    rows: list[SaveInfo] = []
    fields: dict[str, Any] | None = None
    for record in decoded.records:
        if fields is None and not is_snapshot(record):
            continue
        fields = fold(fields, record)
        rows.append(save_info(record, fields))
    return rows


# --------------------------------------------------------------------------- timeline pages


@dataclass
class TimelinePage:
    """Save points ``saves`` (oldest first) of a run whose head is ``head``; ``starts[i]``: the
    index of the first message ``saves[i]`` wrote. ``first``: the seq of the run's first stored
    record, when known. ``problem``: the run is damaged within the page (the page then stops at
    its last intact save point, as ``Store.history`` does). ``records``: the parsed records the
    page read, snapshot first (for the settlement notes)."""

    saves: list[SaveInfo]
    starts: list[int]
    head: int
    problem: str | None = None
    first: int | None = None
    records: list[Record] = field(default_factory=list, repr=False)
    fields: dict[str, Any] | None = field(default=None, repr=False)
    """The small fields folded through the page's last record (None: not read)."""


def timeline_page(store: Store, run_id: str, first: int, last: int) -> TimelinePage:
    """Save points ``first..last`` (clamped to the run). Reads ``last - first`` records plus
    those from the snapshot before ``first``. Damage in them: as ``Store.history`` shows it
    (the rows before the damage, and the problem), read by the whole-run decode."""
    try:
        head = _head_seq(store, run_id)
        last = min(last, head)
        first, known = max(1, first), None
        if store.newest_snapshot(run_id, upto_seq=first) == 0:  # a rewritten run starts past 1
            known = first_seq(store, run_id, head)
            first = max(first, known)
        if first > last:
            return TimelinePage([], [], head, first=known)
        saves: list[SaveInfo] = []
        starts: list[int] = []
        records: list[Record] = []
        folded: dict[str, Any] | None = None
        for record, fields in walk(store, run_id, max(1, first), last):
            records.append(record)
            saves.append(save_info(record, fields))
            starts.append(record["msg_start"])
            folded = fields
        return TimelinePage(saves, starts, head, first=1 if first == 1 else known, records=records, fields=folded)
    except Unusual:
        decoded = store.decode(run_id, recover=True)
        pairs = [
            (info, record)
            for info, record in zip(decoded.timeline, decoded.records, strict=True)
            if first <= info.seq <= last
        ]
        stored = store.head_of(run_id)
        head = max(decoded.last_seq, stored.seq if stored is not None else 0)
        return TimelinePage(
            [info for info, _ in pairs],
            [record["msg_start"] for _, record in pairs],
            head,
            decoded.problem,
            decoded.records[0]["seq"] if decoded.records else None,
            [record for _, record in pairs],
        )


def iter_timeline(store: Store, run_id: str) -> Iterator[list[SaveInfo]]:
    """Every save point of the run, a page at a time (``unbroken history --all``). Raises
    ``Unusual`` when a record is damaged; the caller then asks the whole-run decode."""
    head = _head_seq(store, run_id)
    page: list[SaveInfo] = []
    for record, fields in walk(store, run_id, 0, head):
        page.append(save_info(record, fields))
        if len(page) >= PAGE_RECORDS:
            yield page
            page = []
    if page:
        yield page


# --------------------------------------------------------------------------- message pages


@dataclass
class MessagesPage:
    """Messages ``start..start+len(messages)`` and, for each, the save point that wrote it and
    the tokens that save's turn used (``tokens_added``: tokens_used minus the previous save's)."""

    start: int
    messages: list[JSONValue]
    writers: list[SaveInfo]
    tokens_added: list[int]


def messages_page(store: Store, run_id: str, start: int, end: int) -> MessagesPage:
    """Messages ``start <= index < end``. Raises ``Unusual`` (the caller reads the whole run)."""
    head = _head_seq(store, run_id)
    start = max(0, start)
    # the last record whose msg_start <= start holds message ``start``
    low, high = first_seq(store, run_id, head), head
    while low < high:
        middle = (low + high + 1) // 2
        probe = list(iter_records(store, run_id, middle - 1, middle, same_schema=False))
        if probe[0]["msg_start"] <= start:
            low = middle
        else:
            high = middle - 1
    page = MessagesPage(start, [], [], [])
    tokens = 0
    for record, fields in walk(store, run_id, max(1, low - 1), head, page=16, same_schema=True):
        info = save_info(record, fields)
        if record["seq"] >= low:
            at = record["msg_start"]
            for message in record["messages"]:
                if start <= at < end:
                    page.messages.append(message)
                    page.writers.append(info)
                    page.tokens_added.append(max(0, info.tokens_used - tokens))
                at += 1
            if at >= end:
                break
        tokens = info.tokens_used
    return page


# --------------------------------------------------------------------------- streaming export


def stream_export(
    store: Store,
    run_id: str,
    write: Callable[[str], object],
    *,
    exported_at: float | None = None,
    migrations: Migrations = MIGRATIONS,
) -> str | None:
    """Write the run's export (``ops.export_run``'s document, as ``json.dumps(document,
    ensure_ascii=False, indent=2)`` writes it, byte for byte) through ``write`` while reading it,
    a page of records at a time. Returns the document's ``damaged`` (None when intact).

    The document names the run's final fields and whether it is damaged before its messages, so a
    first pass checks every record (CRC, shape, order, ``msg_start`` chain, the fold) and spools
    the save points to a temporary file; the second pass writes the messages. A damaged run (or
    one needing migration) is exported by the whole-run reader, as before: its document stops at
    the last intact save point. If the run is rewritten between the passes (a recovery), the
    export stops with ``CorruptCheckpoint``: write to a file (``export --out``) to never leave half
    a document."""
    at = clock.wall() if exported_at is None else exported_at
    with tempfile.SpooledTemporaryFile(max_size=4 << 20, mode="w+", encoding="utf-8") as saves:
        try:
            head, fields, count = _first_pass(store, run_id, saves, migrations)
        except Unusual:
            document = export_document(store, run_id, exported_at=at)  # damage, migration, never saved
            write(json.dumps(document, ensure_ascii=False, indent=2))
            damaged = document["damaged"]
            return damaged if isinstance(damaged, str) else None
        state = RunState.from_parts(fields, [None] * count)
        small = state.small_fields()
        write(
            '{\n  "format": "unbroken.export",\n  "format_version": 1,\n  "exported_at": '
            + json.dumps(at)
            + ',\n  "damaged": null,\n  "state": {'
        )
        for key, value in small.items():
            write(f"\n    {_text(key, 0)}: {_text(value, 2)},")
        write('\n    "messages": ')
        _write_items(write, _messages(store, run_id, head, count, migrations), 2)
        write('\n  },\n  "save_points": ')
        saves.seek(0)
        _write_items(write, (orjson.loads(line) for line in saves), 1)
        write(',\n  "effect_ledger": ')
        _write_items(write, (entry.to_json() for entry in store.ledger_list(run_id)), 1)
        write("\n}")
    return None


def export_document(store: Store, run_id: str, *, exported_at: float | None = None) -> dict[str, JSONValue]:
    """The export as one JSON document in memory (``ops.export_run``): the whole history is
    decoded (``store.decode(run_id, recover=True)``). A damaged run is exported up to its last
    intact save point, ``damaged`` saying what is wrong."""
    decoded = store.decode(run_id, recover=True)
    state = decoded.state
    return {
        "format": "unbroken.export",
        "format_version": 1,
        "exported_at": clock.wall() if exported_at is None else exported_at,
        "damaged": decoded.problem,
        "state": {**state.small_fields(), "messages": state.messages},
        "save_points": [asdict(info) for info in decoded.timeline],
        "effect_ledger": [entry.to_json() for entry in store.ledger_list(run_id)],
    }


def _first_pass(store: Store, run_id: str, saves: IO[str], migrations: Migrations) -> tuple[int, dict[str, Any], int]:
    head = _head_seq(store, run_id)
    fields: dict[str, Any] | None = None
    count = 0
    rows: list[str] = []
    for record, folded in walk(store, run_id, 0, head, migrations=migrations, same_schema=True):
        fields = folded
        count = record["msg_start"] + len(record["messages"])
        info = save_info(record, folded)  # one line each (JSON text holds no raw newline); asdict is 10x slower
        rows.append(orjson.dumps({name: getattr(info, name) for name in _SAVE_FIELDS}).decode())
        if len(rows) >= PAGE_RECORDS:
            saves.write("\n".join(rows) + "\n")
            rows = []
    if rows:
        saves.write("\n".join(rows) + "\n")
    if fields is None:
        raise Unusual("no records")
    try:
        accept_fields(fields)
    except ValueError as exc:
        raise Unusual(str(exc)) from exc
    if fields["message_count"] != count or fields["run_id"] != run_id:
        raise Unusual("fields do not match the records")
    return head, fields, count


def _messages(store: Store, run_id: str, head: int, count: int, migrations: Migrations) -> Iterator[JSONValue]:
    written = 0
    try:  # the first pass folded and checked the fields: this one checks each record and its place
        for record in iter_records(store, run_id, 0, head, migrations=migrations, leading_gap=True):
            if record["msg_start"] != written:
                raise Unusual(f"record {record['seq']} starts at message {record['msg_start']}, not {written}")
            yield from record["messages"]
            written += len(record["messages"])
    except Unusual as exc:
        raise CorruptCheckpoint(
            f"run {run_id!r} changed while it was exported ({exc}); the export is incomplete. Export again",
            last_good_seq=None,
        ) from exc
    if written != count:
        raise CorruptCheckpoint(
            f"run {run_id!r} changed while it was exported; the export is incomplete. Export again", last_good_seq=None
        )


def _text(value: Any, level: int) -> str:
    """``value`` as ``json.dumps(value, ensure_ascii=False, indent=2)`` writes it, nested ``level``
    deep. orjson writes the same text about eight times faster, except floats that either writes
    with an exponent or below 1e-4 (``2.5e-05`` against ``0.000025``; ``1.5e-07`` against
    ``1.5e-7``) and what it refuses (nesting past 255): text that may hold one of those (a digit
    followed by ``e``, or ``0.0000``, even inside a string) is written by the stdlib encoder."""
    data: bytes | None
    try:
        data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        data = None
    text = json.dumps(value, ensure_ascii=False, indent=2) if data is None or _risky(data) else data.decode()
    return text.replace("\n", "\n" + "  " * level) if level else text


def _risky(data: bytes | None) -> bool:
    """Whether orjson's text may differ from the stdlib's, or orjson refused the value (None): a
    digit before ``e``/``E`` (an exponent) or a number starting ``0.0000`` (a float below 1e-4).
    Text inside strings may match too: it is then written by the stdlib, the same text. (Digits
    1-9 mapped to ``1``, then ``find``s: 5x faster than a regular expression over the export.)"""
    if data is None:
        return True
    flat = (b" " + data).translate(_DIGITS)
    return any(mark in flat for mark in _MARKS)


_DIGITS = bytes.maketrans(b"23456789", b"11111111")
_MARKS = (b"0e", b"1e", b"0E", b"1E", b" 0.0000", b"-0.0000")


def _write_items(write: Callable[[str], object], items: Iterable[Any], level: int, batch: int = 128) -> None:
    """A JSON list, as ``json.dumps(indent=2)`` writes it nested ``level`` deep, written a batch
    of items at a time (one orjson call per batch; a batch that may hold a float the two write
    differently is written item by item by ``_text``)."""
    shift = "\n" + "  " * level
    first = True
    for chunk in _batched(items, batch):
        data: bytes | None
        try:
            data = orjson.dumps(list(chunk), option=orjson.OPT_INDENT_2)
        except orjson.JSONEncodeError:
            data = None
        # the items: orjson's "[" + items + "\n]" without the brackets, unless the stdlib must write them
        if data is None or _risky(data):
            text = ",".join("\n  " + _text(item, 1) for item in chunk)
        else:
            text = data[1:-2].decode()
        write(("[" if first else ",") + text.replace("\n", shift))
        first = False
    write("[]" if first else shift + "]")


def _batched(items: Iterable[Any], size: int) -> Iterator[tuple[Any, ...]]:
    """Tuples of ``size`` items (the last may be shorter), as Python 3.12's ``itertools.batched``."""
    iterator = iter(items)
    while chunk := tuple(itertools.islice(iterator, size)):
        yield chunk
