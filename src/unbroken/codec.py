"""The only place where run state becomes bytes and back.

A run is stored as an append-only list of *save records*, one per save point. Each record
holds the messages appended since the previous save (each message is written exactly once)
and the small fields that changed; every ``snapshot_every`` records, and at every phase
boundary, the record carries all small fields instead of a delta. Loading folds the records
in order: messages are concatenated, fields are taken from the latest snapshot and the deltas
after it. Each record carries a CRC-32 of its exact bytes, so a torn or flipped record is
detected and the run can be loaded at its last intact save point.

Only plain JSON is accepted (``ensure_json``); nothing here can execute code on load.
Bytes are written by orjson (``dumps``) and parsed by orjson (``loads``); the format does not
depend on the writer: any conforming JSON writer's records decode to the same state
(docs/format.md is the specification, tests/golden holds records it must keep reading).
"""

from __future__ import annotations

import gc
import json
import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import CorruptCheckpoint, IncompatibleSchema, NotJSONValue
from .state import PHASES, SCHEMA_VERSION, JSONValue, LedgerEntry, RunState, RunSummary, SaveInfo

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A single save record larger than this is refused before it is parsed."""

_BOUNDARY_PHASES = frozenset({"completed", "max_turns", "failed", "paused"})
"""Entering one of these phases writes a full snapshot of the small fields. (The alternation
between ``awaiting_model`` and ``running_tools`` at every save point is not a boundary.)"""

MAX_DEPTH = 200
"""Deeper nesting than this is refused (at save time and at load time)."""

_strict_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_str = json.encoder.encode_basestring  # a str as compact JSON text (raw UTF-8, like orjson)
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
"""orjson, like many JSON readers, turns integers outside this range into floats: refused at save."""
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_orjson_dumps = orjson.dumps
loads = orjson.loads
"""The one JSON parser of stored bytes (bytes or str in; ``ValueError`` on bad JSON)."""


def _dumps(value: Any) -> str:
    """Compact JSON text of a plain JSON value, by orjson (~10x faster than the stdlib encoder).
    Raises ``TypeError`` for anything that is not plain JSON (a foreign object, a non-str key,
    an integer beyond 64 bits) and ``ValueError`` for NaN or an infinity."""
    try:
        data = _orjson_dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from None
    if b"null" in data:
        # orjson writes NaN and the infinities as null; the strict stdlib encoder refuses them
        # (ValueError). Only texts holding a null pay for this second look.
        _strict_dumps(value)
    return data.decode()


# --------------------------------------------------------------------------- JSON guard


def ensure_json(value: JSONValue, path: str) -> None:
    """Raise ``NotJSONValue`` naming the first path (``business_state.db.conn``) whose value
    would not survive a JSON round trip unchanged."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if item is None or kind is str or kind is bool:
            continue
        if kind is int:
            if not _INT64_MIN <= item <= _UINT64_MAX:
                why = "an integer beyond 64 bits does not survive every JSON reader; store it as a str"
                raise NotJSONValue(where, item, why)
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
                leaf = type(child)
                if child is None or leaf is str or leaf is bool or (leaf is int and _INT64_MIN <= child <= _UINT64_MAX):
                    continue
                stack.append((child, f"{where}.{key}", depth + 1))
            continue
        if kind is list:
            for index, child in enumerate(item):
                leaf = type(child)
                if child is None or leaf is str or leaf is bool or (leaf is int and _INT64_MIN <= child <= _UINT64_MAX):
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
            values = loads(self.buffer)
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
            raise NotJSONValue(
                f"messages[{self._saved_messages}:]", new_messages, "they cannot be encoded as JSON"
            ) from None
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
    message_base: int = 0
    """Index of the first message read. A windowed load (``window.load_window``) reads only the
    messages from the compaction window on; ``state.messages[:message_base]`` are then None
    placeholders (the count is kept, the messages stay on disk) and ``records`` start there."""
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
        value = loads(record.body)
    except RecursionError as exc:  # deep nesting
        raise ValueError("nesting too deep") from exc
    _check_record_shape(value, record.seq, current)
    return value  # type: ignore[no-any-return]


def validate_record(value: object, seq: int, current: int) -> None:
    """The one check of a parsed record's shape, on every decode path: raise ``ValueError`` (or
    ``IncompatibleSchema`` for a newer schema) unless ``value`` is save record ``seq``."""
    _check_record_shape(value, seq, current)


def _check_record_shape(value: object, seq: int, current: int) -> None:
    if type(value) is dict:  # the common case, checked in one expression (20,000 times a resume)
        version = value.get("v")
        if (
            type(version) is int
            and version <= current
            and value.get("seq") == seq
            and type(value.get("messages")) is list
            and type(value.get("fields")) is dict
            and type(value.get("msg_start")) is int
        ):
            return
    _explain_record_shape(value, seq, current)


def _explain_record_shape(value: object, seq: int, current: int) -> None:
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
            # Everything parsed sits in the youngest generation, so the first collection after
            # enabling would walk all of it (60-80 ms at 10,000 turns, right before the model
            # request). Freeze + unfreeze moves it to the oldest generation without a walk; it is
            # collected as usual (by reference count, or a later full collection).
            gc.freeze()
            gc.unfreeze()
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
    records: Iterable[StoredRecord]
    if isinstance(source, PackedRecords):
        fast = source.parse(migrations.current)
        if fast is not None:
            parsed = fast
        # Damage somewhere (or an unexpected order): judge record by record, from the store's
        # ordered read when it gave one, so a misordered buffer is never taken for damage.
        reread = fallback if fallback is not None else source.records
        records = reread() if fast is None else ()
    else:
        records = source
    # Record by record, as the store hands them over: each body is checked, parsed and let go,
    # so a store that streams its records (SQLite) never holds the run's bytes beside the parsed
    # state. (With orjson this is as fast as one parse of all bodies joined.)
    iterator = iter(records)
    expected: int | None = None
    current, crc, append = migrations.current, zlib.crc32, parsed.append
    try:
        for record in iterator:
            seq, body = record.seq, record.body
            # The checks of ``_parse_one`` inlined for the intact case (20,000 records a resume);
            # anything unusual goes through ``_parse_one`` itself, which says what is wrong.
            value = None
            if (expected is None or seq == expected) and len(body) <= MAX_RECORD_BYTES:
                try:  # (a str with a lone surrogate cannot be encoded: judged by _parse_one)
                    raw = body if type(body) is bytes else body.encode()  # type: ignore[union-attr]
                    if f"{crc(raw):08x}" == record.checksum:
                        value = loads(raw)
                except (ValueError, RecursionError):
                    value = None
                if not (
                    type(value) is dict
                    and type(value.get("v")) is int
                    and value["v"] <= current
                    and value.get("seq") == seq
                    and type(value.get("messages")) is list
                    and type(value.get("fields")) is dict
                    and type(value.get("msg_start")) is int
                ):
                    value = None
            try:
                if value is None:
                    if expected is not None and seq != expected:
                        raise ValueError(f"record {expected} is missing")
                    value = _parse_one(record, current)
                append(value)
            except ValueError as exc:
                corrupt_seq = seq
                problem = f"save record {seq} of run {run_id!r} is damaged: {exc}"
                break
            expected = seq + 1
    finally:
        close = getattr(iterator, "close", None)  # a store's generator: end its read now
        if close is not None:
            close()
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
    validate_fields(fields)
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


def validate_fields(fields: dict[str, JSONValue]) -> None:
    """Raise ``ValueError`` unless the folded small fields make a valid state (every decode
    path, whole or windowed, ends here)."""
    missing = [name for name in _REQUIRED_FIELDS if name not in fields]
    if missing:
        raise ValueError(f"fields missing: {', '.join(missing)}")
    _check_field_types(fields)


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
        value = loads(record.body)
    except (ValueError, RecursionError):
        return None
    version = value.get("v") if isinstance(value, dict) else None
    return version if type(version) is int else None
