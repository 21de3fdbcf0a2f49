"""The only place where run state becomes bytes and back.

A run is stored as an append-only list of *save records*, one per save point. Each record
holds the messages appended since the previous save (each message is written exactly once)
and the small fields that changed; every ``snapshot_every`` records, and at every phase
boundary, the record carries all small fields instead of a delta. Loading folds the records
in order: messages are concatenated, fields are taken from the latest snapshot and the deltas
after it. Each record carries a CRC-32 of its exact bytes, so a torn or flipped record is
detected and the run can be loaded at its last intact save point.

Only plain JSON is accepted (``ensure_json``); nothing here can execute code on load.
"""

from __future__ import annotations

import gc
import json
import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import CorruptCheckpoint, IncompatibleSchema, NotJSONValue
from .state import PHASES, SCHEMA_VERSION, JSONValue, LedgerEntry, RunState, RunSummary, SaveInfo

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A single save record larger than this is refused before it is parsed."""

_BOUNDARY_PHASES = frozenset({"completed", "max_turns", "failed", "paused"})
"""Entering one of these phases writes a full snapshot of the small fields. (The alternation
between ``awaiting_model`` and ``running_tools`` at every save point is not a boundary.)"""

MAX_DEPTH = 200
"""Deeper nesting than this is refused (at save time and at load time)."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_str = json.encoder.encode_basestring  # what ``_dumps`` does for a str (ensure_ascii=False)
_JSON_LEAVES = frozenset({str, int, bool})


# --------------------------------------------------------------------------- JSON guard


def ensure_json(value: JSONValue, path: str) -> None:
    """Raise ``NotJSONValue`` naming the first path (``business_state.db.conn``) whose value
    would not survive a JSON round trip unchanged."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if item is None or kind is str or kind is bool or kind is int:
            continue
        if kind is float:
            if not math.isfinite(item):
                raise NotJSONValue(where, item, f"{item!r} is not allowed in JSON")
            continue
        if depth >= MAX_DEPTH:
            raise NotJSONValue(where, item, f"nesting deeper than {MAX_DEPTH} levels")
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise NotJSONValue(
                        f"{where}[{key!r}]", key, f"dict key {key!r} is a {type(key).__name__}, not a str"
                    )
                # Plain leaves are accepted here without being pushed or given a path (the
                # hot case in a save); anything else is pushed and judged as before.
                if child is None or type(child) in _JSON_LEAVES:
                    continue
                stack.append((child, f"{where}.{key}", depth + 1))
            continue
        if kind is list:
            for index, child in enumerate(item):
                if child is None or type(child) in _JSON_LEAVES:
                    continue
                stack.append((child, f"{where}[{index}]", depth + 1))
            continue
        why = ""
        if isinstance(item, (bytes, bytearray)):
            why = "bytes are not JSON; store text, or base64-encode it yourself"
        elif isinstance(item, tuple):
            why = "a tuple would come back as a list; store a list"
        raise NotJSONValue(where, item, why)


def dumps(value: JSONValue) -> str:
    """Compact JSON text; the caller has already run ``ensure_json``."""
    return _dumps(value)


def canonical_hash(value: JSONValue) -> str:
    """A stable hash of a JSON value, independent of dict key order."""
    import hashlib

    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def checksum(body: str | bytes) -> str:
    """CRC-32 of a record's UTF-8 bytes, as 8 hex digits."""
    return f"{zlib.crc32(body.encode() if isinstance(body, str) else body):08x}"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class EncodedSave:
    """One save point, ready for a store to write atomically.

    The store writes ``body`` and ``checksum`` verbatim, updates its run summary row from
    ``summary``, and upserts ``ledger`` in the same transaction."""

    run_id: str
    seq: int
    label: str
    body: str
    checksum: str
    snapshot: bool
    summary: RunSummary
    ledger: tuple[LedgerEntry, ...] = ()


@dataclass(frozen=True)
class StoredRecord:
    """A save record as a store returns it. ``body`` is the text the store was given, or its
    UTF-8 bytes when a store's raw read path spares the decode (``Store.read_raw_records``)."""

    seq: int
    body: str | bytes
    checksum: str


@dataclass(frozen=True)
class PackedRecords:
    """All of a run's record bodies in one buffer, as a store's fast read path can hand them
    over: ``b"[" + body_1 + b"," + ... + body_n + b"]"`` (a JSON array when all are intact),
    with each record's ``(seq, checksum, byte length)`` in order. Parsing it needs no join."""

    buffer: bytes
    index: list[tuple[int, str, int]]

    def records(self) -> list[StoredRecord]:
        """The same records one by one (the careful path, when the fast one finds damage)."""
        view = memoryview(self.buffer)
        records, offset = [], 1
        for seq, check, length in self.index:
            records.append(StoredRecord(seq, bytes(view[offset : offset + length]), check))
            offset += length + 1
        return records

    def parse(self, current: int) -> list[Any] | None:
        """The parsed records if every checksum, seq and shape is right; None otherwise."""
        index = self.index
        if not index or any(seq != index[0][0] + i for i, (seq, _, _) in enumerate(index)):
            return None
        if len(self.buffer) != sum(length for _, _, length in index) + len(index) + 1:
            return None
        view, offset, crc = memoryview(self.buffer), 1, zlib.crc32
        for _, check, length in index:
            if length > MAX_RECORD_BYTES or f"{crc(view[offset : offset + length]):08x}" != check:
                return None
            offset += length + 1
        try:
            values = json.loads(self.buffer)
        except (ValueError, RecursionError):
            return None
        if not isinstance(values, list) or len(values) != len(index):
            return None
        try:
            for (seq, _, _), value in zip(index, values, strict=True):
                _check_record_shape(value, seq, current)
        except ValueError:
            return None
        return values


def _text(body: str | bytes) -> str:
    return body if isinstance(body, str) else body.decode("utf-8")


class Encoder:
    """Turns successive states of one run into save records (deltas plus periodic snapshots).

    Keeps the JSON text of the last saved small fields, so each record holds only the fields
    whose text changed. Comparing text (not objects) also catches in-place mutation of
    ``business_state`` by tools."""

    def __init__(self, snapshot_every: int = 50, *, messages_are_json: bool = False) -> None:
        # ``messages_are_json``: the model builds every message from parsed JSON (the SDK
        # adapters and ScriptedModel do), so a message cannot hold a tuple or a non-str key;
        # the walk of each new message is skipped and only the encoder's own refusals (NaN,
        # foreign objects) remain, still reported with the message's path.
        self.messages_are_json = messages_are_json
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be at least 1")
        self.snapshot_every = snapshot_every
        self._saved_fields: dict[str, str] | None = None
        self._saved_messages = 0
        self._since_snapshot = 0
        self._pending: dict[str, str] | None = None

    def _field_texts(self, state: RunState, previous: dict[str, str] | None = None) -> dict[str, str]:
        # Runs at every save over ~20 fields, mostly scalars: the scalar branches give the
        # text ``_dumps`` would, without its per-call set-up (the benchmark's hot path).
        # Containers are encoded by the C encoder (which refuses NaN and foreign objects) and
        # walked by ``ensure_json`` (which also refuses tuples and non-str keys, and names the
        # path) only when their text differs from the saved one: unchanged text writes nothing.
        texts: dict[str, str] = {}
        for key, value in state.small_fields().items():
            kind = type(value)
            if kind is str:
                texts[key] = _encode_str(value)
            elif kind is int:
                texts[key] = int.__repr__(value)
            elif value is None:
                texts[key] = "null"
            elif kind is float and math.isfinite(value):
                texts[key] = float.__repr__(value)
            elif not value and (kind is dict or kind is list):
                texts[key] = "{}" if kind is dict else "[]"
            else:
                try:
                    text = _dumps(value)
                except (TypeError, ValueError, RecursionError):
                    ensure_json(value, key)
                    raise NotJSONValue(key, value, "it cannot be encoded as JSON") from None
                # With a JSON-built model, only business_state holds the user's own values; the
                # other containers (calls, results, usage, summary) are built from parsed JSON.
                if (previous is None or previous.get(key) != text) and (
                    not self.messages_are_json or key == "business_state"
                ):
                    ensure_json(value, key)
                texts[key] = text
        return texts

    def prime(self, state: RunState) -> None:
        """Declare ``state`` as what the store already holds (after a load)."""
        self._saved_fields = self._field_texts(state)
        self._saved_messages = len(state.messages)
        self._since_snapshot = state.save_seq % self.snapshot_every

    def encode(
        self,
        state: RunState,
        label: str,
        *,
        force_snapshot: bool = False,
        ledger: Sequence[LedgerEntry] = (),
    ) -> EncodedSave:
        """Encode the next save of ``state``. ``state.save_seq`` must already be the new seq.
        Raises ``NotJSONValue`` (naming the path) before anything is written."""
        texts = self._field_texts(state, self._saved_fields)
        new_messages = state.messages[self._saved_messages :]
        if not self.messages_are_json:
            for index, message in enumerate(new_messages, start=self._saved_messages):
                ensure_json(message, f"messages[{index}]")
        try:
            messages_text = _dumps(new_messages)
        except (TypeError, ValueError, RecursionError):
            for index, message in enumerate(new_messages, start=self._saved_messages):
                ensure_json(message, f"messages[{index}]")
            raise
        previous = self._saved_fields
        snapshot = (
            force_snapshot
            or previous is None
            or self._since_snapshot + 1 >= self.snapshot_every
            or (previous.get("phase") != texts["phase"] and state.phase in _BOUNDARY_PHASES)
        )
        if snapshot or previous is None:
            changed = texts
        else:
            changed = {key: text for key, text in texts.items() if previous.get(key) != text}
        fields_text = ",".join(f"{_encode_str(key)}:{text}" for key, text in changed.items())
        body = (
            f'{{"v":{int(state.schema_version)},"seq":{int(state.save_seq)},"label":{_dumps(label)},'
            f'"snapshot":{"true" if snapshot else "false"},"msg_start":{self._saved_messages},'
            f'"messages":{messages_text},"fields":{{{fields_text}}}}}'
        )
        self._pending = texts
        return EncodedSave(
            run_id=state.run_id,
            seq=state.save_seq,
            label=label,
            body=body,
            checksum=checksum(body),
            snapshot=snapshot,
            summary=summary_of(state),
            ledger=tuple(ledger),
        )

    def committed(self, state: RunState, encoded: EncodedSave) -> None:
        """Call once the store has durably written ``encoded``."""
        self._saved_fields = self._pending if self._pending is not None else self._field_texts(state)
        self._pending = None
        self._saved_messages = len(state.messages)
        self._since_snapshot = 0 if encoded.snapshot else self._since_snapshot + 1


def summary_of(state: RunState) -> RunSummary:
    return RunSummary(
        run_id=state.run_id,
        task=state.task,
        phase=state.phase,
        turns=state.turns,
        tokens_used=state.tokens_used,
        save_seq=state.save_seq,
        updated_at=state.updated_at,
    )


def encode_full(state: RunState, label: str) -> EncodedSave:
    """A single snapshot record holding the whole state (used to rewrite a run)."""
    encoder = Encoder()
    return encoder.encode(state, label, force_snapshot=True)


# --------------------------------------------------------------------------- migrations

Migration = Callable[[dict[str, JSONValue]], dict[str, JSONValue]]


@dataclass
class Migrations:
    """Registered steps that upgrade unbroken's own stored format one version at a time.

    A step receives ``{"fields": {...}, "messages": [...]}`` at version ``n`` and returns it at
    version ``n + 1``. Steps are plain functions registered in code; nothing is loaded from data."""

    current: int = SCHEMA_VERSION
    steps: dict[int, Migration] = field(default_factory=dict)

    def register(self, from_version: int) -> Callable[[Migration], Migration]:
        def decorate(step: Migration) -> Migration:
            self.steps[from_version] = step
            return step

        return decorate

    def upgrade(self, run: dict[str, JSONValue], version: int, run_id: str) -> dict[str, JSONValue]:
        if version > self.current:
            raise IncompatibleSchema(
                f"run {run_id!r} was saved with checkpoint schema {version}, newer than the {self.current} "
                "this unbroken understands; upgrade unbroken to load it (nothing was changed)"
            )
        while version < self.current:
            step = self.steps.get(version)
            if step is None:
                raise IncompatibleSchema(
                    f"run {run_id!r} has checkpoint schema {version} and no migration to {version + 1} "
                    "is registered; nothing was changed"
                )
            run = step(run)
            version += 1
            run["fields"]["schema_version"] = version
        return run


MIGRATIONS = Migrations()
"""unbroken's own format migrations (none yet: schema 1 is the first)."""


# --------------------------------------------------------------------------- decoding


@dataclass
class Decoded:
    """The result of folding a run's records."""

    state: RunState
    last_seq: int
    records: list[dict[str, JSONValue]] = field(repr=False)
    """The parsed save records, oldest first; ``timeline`` is built from them."""
    corrupt_seq: int | None = None
    problem: str | None = None
    migrated_from: int | None = None
    _timeline: list[SaveInfo] | None = field(default=None, repr=False, compare=False)

    @property
    def timeline(self) -> list[SaveInfo]:
        """The run's save points, oldest first. Built on first use: a resume does not need
        them, and building one object per save point is a tenth of a long run's load time."""
        if self._timeline is None:
            fields: dict[str, Any] = {}
            timeline = []
            for record in self.records:
                fields = dict(record["fields"]) if record["snapshot"] else {**fields, **record["fields"]}
                timeline.append(
                    SaveInfo(
                        seq=record["seq"],
                        label=record["label"],
                        phase=fields.get("phase", "?"),
                        turns=fields.get("turns", 0),
                        tokens_used=fields.get("tokens_used", 0),
                        messages_added=len(record["messages"]),
                        at=fields.get("updated_at", 0.0),
                        snapshot=bool(record["snapshot"]),
                    )
                )
            self._timeline = timeline
        return self._timeline


def _parse_one(record: StoredRecord, current: int) -> dict[str, JSONValue]:
    if len(record.body) > MAX_RECORD_BYTES:
        raise ValueError(f"record is {len(record.body)} bytes, over the {MAX_RECORD_BYTES} cap")
    if checksum(record.body) != record.checksum:
        raise ValueError("checksum mismatch (torn or corrupted write)")
    try:
        value = json.loads(record.body)
    except RecursionError as exc:  # deep nesting
        raise ValueError("nesting too deep") from exc
    _check_record_shape(value, record.seq, current)
    return value  # type: ignore[no-any-return]


def _check_record_shape(value: object, seq: int, current: int) -> None:
    if not isinstance(value, dict):
        raise ValueError("record is not a JSON object")
    version = value.get("v")
    if type(version) is not int:
        raise ValueError("record has no schema version")
    if version > current:
        raise IncompatibleSchema(
            f"save record {seq} was written with checkpoint schema {version}, newer than the {current} "
            "this unbroken understands; upgrade unbroken to load it (nothing was changed)"
        )
    if value.get("seq") != seq:
        raise ValueError(f"record claims seq {value.get('seq')!r}")
    if not isinstance(value.get("messages"), list) or not isinstance(value.get("fields"), dict):
        raise ValueError("record lacks messages or fields")
    if type(value.get("msg_start")) is not int:
        raise ValueError("record lacks msg_start")


_REQUIRED_FIELDS = (
    "run_id",
    "task",
    "schema_version",
    "save_seq",
    "turns",
    "tokens_used",
    "phase",
    "message_count",
    "created_at",
    "updated_at",
)


def decode(
    run_id: str,
    records: Iterable[StoredRecord] | PackedRecords,
    *,
    recover: bool = False,
    migrations: Migrations = MIGRATIONS,
    fallback: Callable[[], Iterable[StoredRecord]] | None = None,
) -> Decoded:
    """Fold a run's records (in seq order) into its state. ``records`` may be packed (one
    buffer); when the packed buffer does not check out, ``fallback`` (if given) reads the
    records one by one and those are judged instead.

    With ``recover=False`` any damaged record raises ``CorruptCheckpoint``; with ``recover=True``
    the state is that of the last intact save point before the first damaged record, and
    ``Decoded.problem`` says what was skipped. A record from a newer schema raises
    ``IncompatibleSchema`` either way."""
    # Parsing a long history allocates millions of containers, and the cyclic garbage
    # collector would run over and over on the growing heap (2-3x the parse time) finding
    # nothing: JSON holds no reference cycles. Pause it for the parse; it resumes after.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _decode(run_id, records, recover, migrations, fallback)
    finally:
        if paused:
            gc.enable()


def _decode(
    run_id: str,
    source: Iterable[StoredRecord] | PackedRecords,
    recover: bool,
    migrations: Migrations,
    fallback: Callable[[], Iterable[StoredRecord]] | None,
) -> Decoded:
    parsed: list[dict[str, JSONValue]] = []
    problem: str | None = None
    corrupt_seq: int | None = None
    fast: list[Any] | None = None
    if isinstance(source, PackedRecords):
        fast = source.parse(migrations.current)
        # Damage somewhere (or an unexpected order): judge record by record, from the store's
        # ordered read when it gave one, so a misordered buffer is never taken for damage.
        reread = fallback if fallback is not None else source.records
        records = list(reread()) if fast is None else []
    else:
        records = list(source)
    # One parse of all bodies is ~2x faster than one parse per record; checksums first.
    if (
        fast is None
        and records
        and all(len(r.body) <= MAX_RECORD_BYTES for r in records)
        and all(r.seq == records[0].seq + i for i, r in enumerate(records))
        and all(checksum(r.body) == r.checksum for r in records)
    ):
        try:
            if all(isinstance(r.body, bytes) for r in records):
                # Bytes (a store's raw path): join without widening, decode once in json.loads.
                fast = json.loads(b"[" + b",".join(r.body for r in records) + b"]")  # type: ignore[misc]
            else:
                fast = json.loads("[" + ",".join(_text(r.body) for r in records) + "]")
        except (ValueError, RecursionError):
            fast = None
        if fast is not None and len(fast) == len(records):
            try:
                for record, value in zip(records, fast, strict=True):
                    _check_record_shape(value, record.seq, migrations.current)
            except ValueError:
                fast = None
        else:
            fast = None
    if fast is not None:
        parsed = fast
    else:
        expected = records[0].seq if records else 1
        for record in records:
            try:
                if record.seq != expected:
                    raise ValueError(f"record {expected} is missing")
                parsed.append(_parse_one(record, migrations.current))
            except ValueError as exc:
                corrupt_seq = record.seq
                problem = f"save record {record.seq} of run {run_id!r} is damaged: {exc}"
                break
            expected += 1
    last_good = parsed[-1]["seq"] if parsed else 0
    if problem is not None and not recover:
        raise CorruptCheckpoint(
            f"{problem}; the last intact save point is {last_good}. Load with recover=True (or "
            "`unbroken resume`) to continue from it; nothing was changed",
            last_good_seq=last_good,
        )
    if not parsed:
        raise CorruptCheckpoint(problem or f"run {run_id!r} has no save records", last_good_seq=0)
    try:
        return _fold(run_id, parsed, corrupt_seq, problem, migrations)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CorruptCheckpoint(
            f"run {run_id!r} does not fold into a valid state ({type(exc).__name__}: {exc}); nothing was changed",
            last_good_seq=None,
        ) from exc


def _fold(
    run_id: str,
    parsed: list[dict[str, JSONValue]],
    corrupt_seq: int | None,
    problem: str | None,
    migrations: Migrations,
) -> Decoded:
    messages: list[JSONValue] = []
    fields: dict[str, JSONValue] = {}
    oldest = migrations.current
    if not parsed[0]["snapshot"]:
        raise ValueError("the first record is not a snapshot")
    for record in parsed:
        version = record["v"]
        oldest = min(oldest, version)
        if record["msg_start"] != len(messages):
            raise ValueError(
                f"record {record['seq']} starts at message {record['msg_start']}, expected {len(messages)}"
            )
        added = record["messages"]
        messages.extend(added)
        if record["snapshot"]:
            fields = dict(record["fields"])
        else:
            fields.update(record["fields"])
    missing = [name for name in _REQUIRED_FIELDS if name not in fields]
    if missing:
        raise ValueError(f"fields missing: {', '.join(missing)}")
    _check_field_types(fields)
    if fields["message_count"] != len(messages):
        raise ValueError(f"state says {fields['message_count']} messages, records hold {len(messages)}")
    if fields["run_id"] != run_id:
        raise ValueError(f"records belong to run {fields['run_id']!r}")
    migrated_from = None
    if oldest < migrations.current:
        migrated_from = oldest
        upgraded = migrations.upgrade({"fields": fields, "messages": messages}, oldest, run_id)
        fields, messages = upgraded["fields"], upgraded["messages"]
    state = RunState.from_parts(fields, messages)
    return Decoded(
        state=state,
        last_seq=parsed[-1]["seq"],
        records=parsed,
        corrupt_seq=corrupt_seq,
        problem=problem,
        migrated_from=migrated_from,
    )


_INT_FIELDS = ("schema_version", "save_seq", "turns", "tokens_used", "message_count")


def _check_field_types(fields: dict[str, JSONValue]) -> None:
    """A record can pass its checksum and still hold nonsense (written by hand, or by a bug):
    refuse a state whose counters, phase or containers have the wrong type."""
    for name in _INT_FIELDS:
        value = fields.get(name)
        if type(value) is not int or value < 0:
            raise ValueError(f"field {name} is {value!r}, not a non-negative integer")
    if fields.get("phase") not in PHASES:
        raise ValueError(f"field phase is {fields.get('phase')!r}, not one of {', '.join(PHASES)}")
    for name in ("run_id", "task"):
        if type(fields.get(name)) is not str:
            raise ValueError(f"field {name} is not a string")
    for name, kind in (("business_state", dict), ("pending_calls", list), ("results", dict), ("usage", dict)):
        if name in fields and type(fields[name]) is not kind:
            raise ValueError(f"field {name} is a {type(fields[name]).__name__}, not a {kind.__name__}")
    for name in ("created_at", "updated_at"):
        value = fields.get(name)
        if type(value) not in (int, float):
            raise ValueError(f"field {name} is {value!r}, not a number")


def peek_version(record: StoredRecord) -> int | None:
    """The schema version a record was written with, or None if it cannot be read."""
    try:
        value = json.loads(record.body)
    except (ValueError, RecursionError):
        return None
    version = value.get("v") if isinstance(value, dict) else None
    return version if type(version) is int else None
