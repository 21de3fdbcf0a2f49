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
import operator
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import orjson

from ._plain import Frozen, Plain
from .acceptance import MAX_RECORD_BYTES as MAX_RECORD_BYTES  # (re-exported: stores and tests use them)
from .acceptance import SEALED_RAW, RunRecords, accept_fields, accept_parsed, fields_intact, run_seed
from .acceptance import checksum as checksum
from .acceptance import loads as loads
from .errors import CorruptCheckpoint, EncryptionKeyMissing, IncompatibleSchema, NotJSONValue, UnloadableState
from .state import (
    PHASES,
    SCHEMA_VERSION,
    JSONValue,
    LedgerEntry,
    RunState,
    RunSummary,
    SaveInfo,
    ToolCall,
    occurrence_key,
    sha256_hex,
)

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


def _dumps(value: Any) -> str:
    """Compact JSON text of a plain JSON value, by orjson (~10x faster than the stdlib encoder).
    Raises ``TypeError`` for anything that is not plain JSON (a foreign object, a non-str key,
    an integer beyond 64 bits) and ``ValueError`` for NaN or an infinity."""
    try:
        data = _orjson_dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from None
    text = data.decode()
    if "null" in text:  # (searched in the str: ~7x faster than in the bytes for a short text)
        # orjson writes NaN and the infinities as null; the strict stdlib encoder refuses them
        # (ValueError). Only texts holding a null pay for this second look.
        _strict_dumps(value)
    return text


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
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return sha256_hex(text.encode())


# --------------------------------------------------------------------------- records


class EncodedSave(Plain):  # not frozen: one is built at every save, and a frozen class costs ~4x to build
    """One save point, ready for a store to write atomically. Treat it as read-only.

    The store writes ``body`` and ``checksum`` verbatim, updates its run summary row from
    ``summary``, and upserts ``ledger`` in the same transaction. ``body`` is text, or raw bytes
    (a sealed record) only for a backend that declares ``stores.backend.BytesBodies``."""

    __slots__ = ("body", "checksum", "label", "ledger", "run_id", "seq", "snapshot", "summary")
    run_id: str
    seq: int
    label: str
    body: str | bytes
    checksum: str
    snapshot: bool
    summary: RunSummary
    ledger: tuple[LedgerEntry, ...]

    def __init__(
        self,
        run_id: str,
        seq: int,
        label: str,
        body: str | bytes,
        checksum: str,
        snapshot: bool,
        summary: RunSummary,
        ledger: tuple[LedgerEntry, ...] = (),
    ) -> None:
        self.run_id = run_id
        self.seq = seq
        self.label = label
        self.body = body
        self.checksum = checksum
        self.snapshot = snapshot
        self.summary = summary
        self.ledger = ledger

    def body_bytes(self) -> bytes:
        """``body`` as bytes (the UTF-8 of a text body), as a store that keeps bytes writes it."""
        body = self.body
        return body if type(body) is bytes else body.encode()  # type: ignore[union-attr]


class StoredRecord(Plain):  # not frozen: a frozen class costs 2.7x to build, ~8 ms per 20,000 records read
    """A save record as a store returns it. ``body`` is the text the store was given, or its
    UTF-8 bytes when a store's raw read path spares the decode (``Store.read_raw_records``).
    Treat it as read-only."""

    __slots__ = ("body", "checksum", "seq")
    seq: int
    body: str | bytes
    checksum: str

    def __init__(self, seq: int, body: str | bytes, checksum: str) -> None:
        self.seq = seq
        self.body = body
        self.checksum = checksum


class PackedRecords(Frozen):
    """All of a run's record bodies in one buffer, as a store's fast read path can hand them
    over: ``b"[" + body_1 + b"," + ... + body_n + b"]"`` (a JSON array when all are intact),
    with each record's ``(seq, checksum, byte length)`` in order. Parsing it needs no join."""

    __slots__ = ("buffer", "index")
    buffer: bytes
    index: list[tuple[int, str, int]]

    def __init__(self, buffer: bytes, index: list[tuple[int, str, int]]) -> None:
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "index", index)

    def records(self) -> list[StoredRecord]:
        """The same records one by one (the careful path, when the fast one finds damage)."""
        view = memoryview(self.buffer)
        records, offset = [], 1
        for seq, check, length in self.index:
            records.append(StoredRecord(seq, bytes(view[offset : offset + length]), check))
            offset += length + 1
        return records

    def parse(self, current: int, run: RunRecords) -> list[Any] | None:
        """The parsed records if every checksum (under ``run``'s rule), seq and shape is right;
        None otherwise."""
        index = self.index
        if not index or any(seq != index[0][0] + i for i, (seq, _, _) in enumerate(index)):
            return None
        if len(self.buffer) != sum(length for _, _, length in index) + len(index) + 1:
            return None
        view, offset, crc, seed = memoryview(self.buffer), 1, zlib.crc32, run.seed
        for _, check, length in index:
            if length > MAX_RECORD_BYTES:
                return None
            if f"{crc(view[offset : offset + length], seed):08x}" != check:
                if not run.matches(view[offset : offset + length], check):  # (a record written before)
                    return None
            else:
                run.plain = False
            offset += length + 1
        try:
            values = loads(self.buffer)
        except (ValueError, RecursionError):
            return None
        if not isinstance(values, list) or len(values) != len(index):
            return None
        try:
            for (seq, _, _), value in zip(index, values, strict=True):
                accept_parsed(value, seq, current)
        except ValueError:
            return None
        return values


SEALED_SEGMENT = "A256GCM-segment-v1"
"""A segment's index ``"sealed"``: its records are sealed as one unit under their run's data key
(``stores.encrypted``; docs/format.md, "Segments"), its bodies nonce + ciphertext + tag."""


class Segment(Plain):
    """Save records ``first..last`` that a store packed together once they were no longer recent
    (docs/format.md, "Segments"): ``bodies`` is ``b"[" + body_1 + b"," + ... + body_n + b"]"``,
    each body exactly as it was saved; ``index_text`` the segment's index (``segment_index``);
    ``seal`` the XXH3-64 of ``index_text`` then ``bodies`` (``segment_seal``), written by
    ``pack_records`` only after every record in it passed the record checks. Treat it as read-only."""

    __slots__ = ("bodies", "first", "index_text", "last", "seal")
    first: int
    last: int
    index_text: bytes
    bodies: bytes
    seal: str

    def __init__(self, first: int, last: int, index_text: bytes, bodies: bytes, seal: str) -> None:
        self.first = first
        self.last = last
        self.index_text = index_text
        self.bodies = bodies
        self.seal = seal

    def records(self) -> list[StoredRecord]:
        """The records one by one, each with its own checksum (the careful path). An index that
        does not read, or does not fit the bodies, makes every record of the segment damaged.
        A segment sealed as one unit (``SEALED_SEGMENT``) gives, read without its run's key, each
        record as a sealed stub (``EncryptionKeyMissing`` when accepted, as a sealed record is)."""
        if self.sealed:
            stub = b'{"enc":"A256GCM","segment":[%d,%d]}' % (self.first, self.last)
            return [StoredRecord(seq, stub, checksum(stub)) for seq in range(self.first, self.last + 1)]
        index = segment_index(self.index_text, self.first, self.last, len(self.bodies))
        if index is None:
            return [StoredRecord(seq, b"", "damaged segment index") for seq in range(self.first, self.last + 1)]
        view, records, offset = memoryview(self.bodies), [], 1
        for seq, check, length in index:
            records.append(StoredRecord(seq, bytes(view[offset : offset + length]), check))
            offset += length + 1
        return records

    @property
    def sealed(self) -> bool:
        """Whether its records are sealed as one unit (its index says ``SEALED_SEGMENT``)."""
        if b'"sealed"' not in self.index_text:  # (the common case without a parse)
            return False
        try:
            value = loads(self.index_text)
        except ValueError:
            return False
        return type(value) is dict and value.get("sealed") == SEALED_SEGMENT

    def snapshots(self) -> list[int]:
        """The seqs of the snapshot records in it, from its index (none if the index is damaged)."""
        try:
            value = loads(self.index_text)
        except ValueError:
            return []
        found = value.get("snapshots") if type(value) is dict else None
        return [seq for seq in found if type(seq) is int] if type(found) is list else []


def segment_index(index_text: bytes, first: int, last: int, size: int) -> list[tuple[int, str, int]] | None:
    """A segment's ``(seq, checksum, length)`` per record, or None unless its index reads and
    fits ``first..last`` and bodies of ``size`` bytes."""
    try:
        value = loads(index_text)
        checks, lengths = value["checksums"], value["lengths"]
    except (ValueError, TypeError, KeyError):
        return None
    count = last - first + 1
    if value.get("first") != first or type(checks) is not list or type(lengths) is not list:
        return None
    if len(checks) != count or len(lengths) != count or not all(type(n) is int and n >= 0 for n in lengths):
        return None
    if sum(lengths) + count + 1 != size or not all(type(check) is str for check in checks):
        return None
    return list(zip(range(first, last + 1), checks, lengths, strict=True))


def segment_seal(index_text: bytes, bodies: bytes, seed: int = 0) -> str:
    """The seal of a segment: XXH3-64 from ``seed`` (its run's ``run_seed``; 0 before segments
    were bound to their run) of its index text, then its bodies (``segment_read.seal``)."""
    from .segment_read import seal

    return seal(index_text, bodies, seed)


def pack_records(
    run_id: str, records: Sequence[StoredRecord], current: int = SCHEMA_VERSION
) -> tuple[Segment, list[int]] | None:
    """A segment of the longest run of ``records`` (consecutive seqs from the first) of run
    ``run_id`` that pass every record check (size, checksum under the run's rule, parse, shape:
    ``acceptance.RunRecords``), and the seqs of the snapshots in it; None if the first does not.
    A damaged record is never packed: it stays where it is, so it is reported as itself, and so
    is everything after it. The segment's seal is bound to the run as its records are."""
    kept: list[tuple[int, str, bytes, bool]] = []
    run = RunRecords(run_id)
    for record in records:
        if kept and record.seq != kept[-1][0] + 1:
            break
        body = record.body
        if isinstance(body, str):
            try:
                body = body.encode()
            except UnicodeEncodeError:  # a lone surrogate: not a record anyone could read
                break
        try:
            snapshot = is_snapshot(run.accept(record.seq, body, record.checksum, current))
        except EncryptionKeyMissing:  # a sealed record (stores.encrypted) intact as stored: packed as it is
            snapshot = body[len(SEALED_RAW)] == 1 if body.startswith(SEALED_RAW) else is_snapshot(loads(body))
        except (ValueError, IncompatibleSchema):
            break
        kept.append((record.seq, record.checksum, body, snapshot))
    if not kept:
        return None
    snapshots = [seq for seq, _, _, snapshot in kept if snapshot]
    index = {
        "first": kept[0][0],
        "checksums": [check for _, check, _, _ in kept],
        "lengths": [len(body) for _, _, body, _ in kept],
        "snapshots": snapshots,
    }
    index_text = _orjson_dumps(index)
    bodies = b"[" + b",".join(body for _, _, body, _ in kept) + b"]"
    segment = Segment(kept[0][0], kept[-1][0], index_text, bodies, segment_seal(index_text, bodies, run.seed))
    return segment, snapshots


def accept_before_save(fields: dict[str, JSONValue], state: RunState) -> None:
    """The write-time acceptance: raise ``UnloadableState`` unless the small ``fields`` the encoder
    is about to write (``state.small_fields()``) pass ``acceptance.accept_fields``, the check
    every load makes of what it folded. So a save that no load would accept is never written,
    let alone acknowledged. (The values are checked, not a re-parse of the encoded text: a few
    microseconds a save.)"""
    try:
        accept_fields(fields)
    except ValueError as exc:
        raise UnloadableState(
            f"save {state.save_seq} of run {state.run_id!r} was refused before it was written: {exc}; "
            "every load would refuse it (nothing was saved, the run stays at its last save point)"
        ) from None


class Encoder:
    """Turns successive states of one run into save records (deltas plus periodic snapshots).

    Keeps the JSON text of the last saved small fields, so each record holds only the fields
    whose text changed. Comparing text (not objects) also catches in-place mutation of
    ``business_state`` by tools. The text of a str or float field is reused while the state holds
    the very same object (``_known``); every field is still checked (``accept_before_save``) and
    every container encoded at every save."""

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
        self._call_paths: dict[int, tuple[list[int | str], str]] = {}  # where each call's input was last found
        self._known: dict[str, tuple[str | float, str]] = {}
        """The last text of each small field whose value is a str or a float, with that value:
        the same (immutable) object again has the same text, so it is not encoded again."""
        self._cold: bytes | None = None  # the cold fields' text (``_cold_text``) of the last ``_texts``
        self._pending_cold: bytes | None = None
        self._saved_cold: bytes | None = None  # ... of the state whose texts are ``_saved_fields``
        self._seed: tuple[str, int] = ("", 0)
        """The run whose records this encoder writes and its ``run_seed`` (computed once a run)."""

    def _field_texts(self, state: RunState, previous: dict[str, str] | None = None) -> dict[str, str]:
        return self._texts(state, previous)[0]

    def _texts(self, state: RunState, previous: dict[str, str] | None) -> tuple[dict[str, str], list[str]]:
        """The JSON text of each small field, and the keys whose text is not ``previous``'s (all
        of them when None), in field order: the fields a delta record writes."""
        # Runs at every save over ~20 fields, mostly scalars. Most of them (``_COLD``: the task,
        # the ids, the business state...) rarely change: their values are written in ONE orjson
        # call (``_cold_text``) and, when that text is the one of the state last saved, their
        # texts are the saved ones and only the ``_HOT`` fields are encoded one by one. (Equal
        # JSON texts of two lists mean equal texts of each element: JSON parses one way only.)
        # Containers are encoded by the C encoder (which refuses NaN and foreign objects) and
        # walked by ``ensure_json`` (which also refuses tuples and non-str keys, and names the
        # path) only when their text differs from the saved one: unchanged text writes nothing.
        fields = state.small_fields()
        if not fields_intact(fields):  # (accept_before_save's rule; it says what is wrong)
            accept_before_save(fields, state)
        cold = self._cold = _cold_text(state)
        changed: list[str] = []
        if state.schema_version >= 2:  # derived by the reader: not compared, not written
            del fields["save_seq"], fields["message_count"]
            if (
                cold is not None
                and cold == self._saved_cold
                and previous is not None
                and previous is self._saved_fields
            ):
                texts = previous.copy()  # (same cold texts: same optional keys, in the same order)
                self._hot_texts(fields, previous, texts, changed)
                return texts, changed
        texts = {}
        self._encode_fields(fields, fields, (_NO_TEXTS if previous is None else previous).get, texts, changed)
        return texts, changed

    def _hot_texts(
        self, fields: dict[str, JSONValue], saved: dict[str, str], texts: dict[str, str], changed: list[str]
    ) -> None:
        """``_encode_fields`` over ``_HOT``, written out for the types acceptance has just checked
        (``fields_intact``: turns and tokens_used ints, phase one of ``PHASES``, usage, results,
        resolutions and attempts dicts, pending_calls a list, updated_at an int or a float)."""
        text = repr(fields["turns"])
        if text != saved["turns"]:
            texts["turns"] = text
            changed.append("turns")
        text = repr(fields["tokens_used"])
        if text != saved["tokens_used"]:
            texts["tokens_used"] = text
            changed.append("tokens_used")
        for key in _HOT_CONTAINERS_BEFORE_PHASE:
            value = fields[key]
            text = self._container_text(key, value, saved[key]) if value else "{}"
            if text != saved[key]:
                texts[key] = text
                changed.append(key)
        text = _PHASE_TEXTS[fields["phase"]]
        if text != saved["phase"]:
            texts["phase"] = text
            changed.append("phase")
        value = fields["pending_calls"]
        text = self._container_text("pending_calls", value, saved["pending_calls"]) if value else "[]"
        if text != saved["pending_calls"]:
            texts["pending_calls"] = text
            changed.append("pending_calls")
        for key in _HOT_CONTAINERS_AFTER_CALLS:
            value = fields[key]
            text = self._container_text(key, value, saved[key]) if value else "{}"
            if text != saved[key]:
                texts[key] = text
                changed.append(key)
        value = fields["updated_at"]
        if type(value) is int:
            text = repr(value)
        elif math.isfinite(value):
            text = _float_text(value)
        else:
            text = self._container_text("updated_at", value, saved["updated_at"])  # refuses NaN, infinities
        if text != saved["updated_at"]:
            texts["updated_at"] = text
            changed.append("updated_at")

    def _encode_fields(
        self,
        keys: Iterable[str],
        fields: dict[str, JSONValue],
        saved: Callable[[str], str | None],
        texts: dict[str, str],
        changed: list[str],
    ) -> None:
        """Put the text of each of ``keys`` (in order) in ``texts``, and in ``changed`` those whose
        text is not ``saved(key)``. The scalar branches give the text ``_dumps`` would, without its
        per-call set-up (the benchmark's hot path)."""
        known = self._known
        for key in keys:
            value = fields[key]
            kind = type(value)
            if kind is int:
                text = repr(value)
            elif value is None:
                text = "null"
            elif kind is str or kind is float:
                seen = known.get(key)
                if seen is not None and seen[0] is value:
                    # The very str or float object encoded last time: immutable, so its text
                    # cannot have changed (tests/unit/test_codec_cache.py). A long task or
                    # summary is not escaped again at every save.
                    text = seen[1]
                elif kind is str:
                    text = _encode_str(value)
                    known[key] = (value, text)
                elif math.isfinite(value):
                    text = _float_text(value)
                    known[key] = (value, text)
                else:
                    text = self._container_text(key, value, saved(key))  # refuses NaN, infinities
            elif not value and (kind is dict or kind is list):
                text = "{}" if kind is dict else "[]"
            else:  # a container (mutable: never kept in ``_known``), or not JSON at all
                text = self._container_text(key, value, saved(key))
            texts[key] = text
            if saved(key) != text:
                changed.append(key)

    def _container_text(self, key: str, value: JSONValue, saved: str | None) -> str:
        """The text of a field that is not a plain scalar, walked by ``ensure_json`` when it is
        not ``saved`` (the text last saved). With a JSON-built model, only business_state holds
        the user's own values; the other containers (calls, results, usage, summary) are built
        from parsed JSON."""
        try:  # (_dumps, inline: a save encodes one to three containers)
            text = _orjson_dumps(value, option=_ORJSON_OPTIONS).decode()
            if "null" in text:
                _strict_dumps(value)  # refuses NaN and the infinities, which orjson writes as null
        except (TypeError, ValueError, RecursionError):  # (orjson.JSONEncodeError is a TypeError)
            ensure_json(value, key)
            raise NotJSONValue(key, value, "it cannot be encoded as JSON") from None
        if saved != text and (not self.messages_are_json or key == "business_state"):
            ensure_json(value, key)
        return text

    def prime(self, state: RunState) -> None:
        """Declare ``state`` as what the store already holds (after a load)."""
        self._saved_fields = self._field_texts(state)
        self._saved_cold = self._cold
        self._saved_messages = len(state.messages)
        self._since_snapshot = state.save_seq % self.snapshot_every

    def encode(
        self,
        state: RunState,
        label: str,
        *,
        force_snapshot: bool = False,
        ledger: Sequence[LedgerEntry] = (),
        account: dict[str, JSONValue] | None = None,
    ) -> EncodedSave:
        """Encode the next save of ``state``. ``state.save_seq`` must already be the new seq.
        ``account``: the record's own keys saying how calls were settled and what a resume
        found (``settled``, ``resumed``: ``with_account``). Raises ``NotJSONValue`` (naming the
        path) before anything is written."""
        previous = self._saved_fields
        texts, changed = self._texts(state, previous)
        new_messages = state.messages[self._saved_messages :]
        if not self.messages_are_json:
            for index, message in enumerate(new_messages, start=self._saved_messages):
                ensure_json(message, f"messages[{index}]")
        try:
            messages_text = _dumps(new_messages)
        except (TypeError, ValueError, RecursionError):
            for index, message in enumerate(new_messages, start=self._saved_messages):
                ensure_json(message, f"messages[{index}]")
                try:
                    _dumps(message)
                except (TypeError, ValueError, RecursionError) as exc:  # e.g. a lone surrogate in a str
                    raise NotJSONValue(f"messages[{index}]", message, f"it cannot be encoded ({exc})") from None
            raise NotJSONValue(
                f"messages[{self._saved_messages}:]", new_messages, "they cannot be encoded as JSON"
            ) from None
        snapshot = (
            force_snapshot
            or previous is None
            or self._since_snapshot + 1 >= self.snapshot_every
            or (previous.get("phase") != texts["phase"] and state.phase in _BOUNDARY_PHASES)
            or _field_went_away(previous, texts)  # a delta cannot say so
        )
        version = int(state.schema_version)
        if version >= 2:
            written = texts if snapshot else changed
            body = self._body_v2(state, label, snapshot, texts, written, new_messages, messages_text)
        else:  # the version 1 layout, for states still at schema 1 (and 0)
            written = texts if snapshot else changed
            fields_text = ",".join(f"{_encode_str(key)}:{texts[key]}" for key in written)
            body = (
                f'{{"v":{version},"seq":{int(state.save_seq)},"label":{_text(label)},'
                f'"snapshot":{"true" if snapshot else "false"},"msg_start":{self._saved_messages},'
                f'"messages":{messages_text},"fields":{{{fields_text}}}}}'
            )
        if account:
            body = with_account(body, account)
        run_id, seed = self._seed
        if run_id is not state.run_id and run_id != state.run_id:
            self._seed = (state.run_id, seed := run_seed(state.run_id))
        try:
            check = checksum(body, seed)  # bound to its run: a copy in another run fails its check
        except UnicodeEncodeError:  # a lone surrogate in a str field: no UTF-8 record can hold it
            raise UnloadableState(
                f"save {state.save_seq} of run {state.run_id!r} was refused before it was written: it holds "
                "text that is not Unicode (a lone surrogate); nothing was saved"
            ) from None
        self._pending, self._pending_cold = texts, self._cold
        summary = RunSummary(
            state.run_id, state.task, state.phase, state.turns, state.tokens_used, state.save_seq, state.updated_at
        )  # (summary_of, inline: every save builds one)
        return EncodedSave(state.run_id, state.save_seq, label, body, check, snapshot, summary, tuple(ledger))

    def _body_v2(
        self,
        state: RunState,
        label: str,
        snapshot: bool,
        texts: dict[str, str],
        written: Iterable[str],
        new_messages: list[JSONValue],
        messages_text: str,
    ) -> str:
        """A version 2 record: no ``"snapshot":false``, no fields the reader derives (``save_seq``,
        ``message_count``), and pending calls that refer to their tool-use block in the record's
        own messages instead of repeating it (``_calls_text``). ``written``: the keys of the fields
        it holds (every field in a snapshot, those whose text changed in a delta), in field order."""
        parts = []
        for key in written:
            text = texts[key]
            if key == "pending_calls" and text != "[]":
                text = _calls_text(state, new_messages, self._call_paths)
            parts.append((_KEY_TEXTS.get(key) or _encode_str(key) + ":") + text)
        return (
            f'{{"v":{int(state.schema_version)},"seq":{int(state.save_seq)},"label":{_text(label)},'
            f'{_SNAPSHOT_TRUE if snapshot else ""}"msg_start":{self._saved_messages},'
            f'"messages":{messages_text},"fields":{{{",".join(parts)}}}}}'
        )

    def committed(self, state: RunState, encoded: EncodedSave) -> None:
        """Call once the store has durably written ``encoded``."""
        if self._pending is not None:
            self._saved_fields, self._saved_cold = self._pending, self._pending_cold
        else:
            self._saved_fields = self._field_texts(state)
            self._saved_cold = self._cold
        self._pending = self._pending_cold = None
        self._saved_messages = len(state.messages)
        self._since_snapshot = 0 if encoded.snapshot else self._since_snapshot + 1


# --------------------------------------------------------------------------- the account of a save

ACCOUNT_KEYS = ("settled", "resumed")
"""Record keys after ``fields``, written only when set (docs/format.md, "The account of a
save"): how the calls this record settles were settled, what a resume found. Absent: not
recorded (older records, or nothing to say)."""


def with_account(body: str, account: dict[str, JSONValue]) -> str:
    """``body`` (a record's JSON object text) with the ``account`` keys appended."""
    extra = "".join(f",{_encode_str(key)}:{_dumps(account[key])}" for key in ACCOUNT_KEYS if account.get(key))
    return f"{body[:-1]}{extra}}}" if extra else body


# --------------------------------------------------------------------------- version 2 pending calls

_SNAPSHOT_TRUE = '"snapshot":true,'
_NO_TEXTS: dict[str, str] = {}  # the saved texts before a first save: every field is new
_KEY_TEXTS = {
    key: f"{_encode_str(key)}:"
    for key in (
        *RunState(run_id="-", task="").small_fields(),
        "approvals",
        "conversation",
        "history_checked",
        "resumes",
    )
}
_CALL_KEYS = ("id", "name", "input")

_HOT = ("turns", "tokens_used", "usage", "phase", "pending_calls", "results", "resolutions", "attempts", "updated_at")
"""The small fields a save usually changes, encoded one by one at every save (in field order)."""
_COLD = (
    "run_id",
    "task",
    "provider",
    "schema_version",
    "business_state",
    "business_state_version",
    "output",
    "error",
    "summary",
    "summary_upto",
    "created_at",
    "approvals",
    "conversation",
    "history_checked",
    "resumes",
)
"""The other small fields (all but ``_HOT`` and the derived ``save_seq`` and ``message_count``,
tests/unit/test_codec_cache.py checks the split): written in one orjson call (``_cold_text``)."""
_cold_values = operator.attrgetter(*_COLD)
_HOT_CONTAINERS_BEFORE_PHASE = ("usage",)
_HOT_CONTAINERS_AFTER_CALLS = ("results", "resolutions", "attempts")
_PHASE_TEXTS = {phase: _encode_str(phase) for phase in PHASES}


def _cold_text(state: RunState) -> bytes | None:
    """The JSON text of the ``_COLD`` attributes of ``state`` as one list, or None when it cannot
    stand for their texts: a value orjson refuses, or a ``null`` that is not one of the values
    themselves being None (orjson writes NaN and the infinities as null; a nested None or a text
    holding "null" also lands here, and such a state is simply encoded field by field)."""
    values = _cold_values(state)
    try:
        text = _orjson_dumps(values, option=_ORJSON_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    if text.count(b"null") != values.count(None):  # (not ``b"null" in``: it first tries the operand as an int)
        return None
    return text


def _float_text(value: float) -> str:
    """``float.__repr__(value)`` for a finite float: orjson writes the same text ~10x faster for
    every magnitude from 1e-4 up (below, it writes 1e-5 as 0.00001 where repr writes 1e-05)."""
    if value >= 1e-4 or value <= -1e-4:
        return _orjson_dumps(value).decode()
    return float.__repr__(value)


def _text(value: JSONValue) -> str:
    return _encode_str(value) if type(value) is str else _dumps(value)


def _calls_text(state: RunState, new_messages: list[JSONValue], hints: dict[int, tuple[list[int | str], str]]) -> str:
    """The version 2 text of ``pending_calls``. An entry holds only what the reader cannot find
    elsewhere: ``"at"`` is the path (list indices and object keys) into this record's
    ``messages`` of an object whose ``input`` is the call's input (and whose ``id`` / ``name``,
    when equal, are the call's); ``idempotency_key`` is left out when it is
    ``occurrence_key(run_id, seq, position, id)`` of this very record. ``hints``: where the input
    of the call at each position was found last time, tried first (a turn is usually laid out
    like the one before it); the walk in document order is the fallback."""
    items = []
    seq, run_id = int(state.save_seq), state.run_id
    for position, call in enumerate(state.pending_calls):
        call_id, name = call.id, call.name
        holder, hint = None, hints.get(position)
        if call.error is None and type(call.input) is dict and call.input:
            holder = _try_path(new_messages, call, hint[0]) if hint is not None else None
            if holder is None:
                found = _find_input(new_messages, call)
                if found is not None:
                    holder, hint = found[1], (found[0], _orjson_dumps(found[0]).decode())
                    hints[position] = hint
        if holder is None or hint is None:
            text = f'"id":{_text(call_id)},"name":{_text(name)},"input":{_dumps(call.input)}'
        else:
            text = f'"at":{hint[1]}'
            if not (type(call_id) is str and holder.get("id") == call_id and type(holder["id"]) is str):
                text += f',"id":{_text(call_id)}'
            if not (type(name) is str and holder.get("name") == name and type(holder["name"]) is str):
                text += f',"name":{_text(name)}'
        key = call.idempotency_key
        if type(call_id) is not str or key != occurrence_key(run_id, seq, position, call_id):
            text += f',"idempotency_key":{_text(key)}'
        if call.error is not None:
            text += f',"error":{_text(call.error)}'
        items.append(text)
    return "[{" + "},{".join(items) + "}]" if items else "[]"


_MISSING = object()


def _json_bytes(value: object) -> bytes | None:
    try:
        return _orjson_dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return None


def _try_path(messages: list[JSONValue], call: ToolCall, path: list[int | str]) -> dict[str, Any] | None:
    """The object at ``path`` if it holds the call's input and id (else None)."""
    node: Any = messages
    try:  # (a path this encoder found before: list indices and object keys, none negative)
        for step in path:
            node = node[step]
    except (LookupError, TypeError):
        return None
    if type(node) is not dict or node.get("id") != call.id:
        return None
    value = node.get("input")
    if value is call.input or (type(value) is dict and value == call.input and _same_text(value, call.input)):
        return node
    return None


def _same_text(a: object, b: object) -> bool:
    first = _json_bytes(a)
    return first is not None and first == _json_bytes(b)


_OPTIONAL_FIELDS = ("approvals", "conversation", "history_checked", "resumes")
"""The small fields ``RunState.small_fields`` leaves out when unset (tests/unit/test_codec_v2.py
checks this list)."""


def _field_went_away(previous: dict[str, str], texts: dict[str, str]) -> bool:
    for key in _OPTIONAL_FIELDS:  # noqa: SIM110 (a loop: any() over a generator is slower here)
        if key in previous and key not in texts:
            return True
    return False


def _find_input(messages: list[JSONValue], call: ToolCall) -> tuple[list[int | str], dict[str, Any]] | None:
    """Where, in ``messages``, an object holds ``call.input`` under ``"input"`` (the same object, or
    one with the same JSON text: Python's == also says 1 == 1.0 == True): its path and the object.
    The first in document order whose ``id`` is the call's, else the first."""
    search = _InputSearch(call)
    path: list[int | str] = []
    found = search.visit(messages, path)
    return found if found is not None else search.first


class _InputSearch:
    __slots__ = ("call_id", "first", "target", "wanted")

    def __init__(self, call: ToolCall) -> None:
        self.target, self.call_id = call.input, call.id
        self.wanted: bytes | None = None
        self.first: tuple[list[int | str], dict[str, Any]] | None = None

    def visit(self, node: Any, path: list[int | str]) -> tuple[list[int | str], dict[str, Any]] | None:
        if type(node) is dict:
            if "input" in node:
                value = node["input"]
                if (value is self.target or (type(value) is dict and value == self.target)) and self._same(value):
                    if node.get("id") == self.call_id:
                        return list(path), node
                    if self.first is None:
                        self.first = (list(path), node)
            pairs: Iterable[tuple[int | str, Any]] = node.items()
        else:
            pairs = enumerate(node)
        for step, child in pairs:
            kind = type(child)
            if kind is dict or kind is list:
                path.append(step)
                found = self.visit(child, path)
                if found is not None:
                    return found
                path.pop()
        return None

    def _same(self, value: Any) -> bool:
        if value is self.target:
            return True
        if self.wanted is None:
            self.wanted = _json_bytes(self.target)
        return self.wanted is not None and _json_bytes(value) == self.wanted


def _expand_calls(entries: object, record: dict[str, Any], run_id: object) -> list[dict[str, JSONValue]]:
    """A version 2 record's ``pending_calls`` in full (``ToolCall.to_json`` form)."""
    if type(entries) is not list:
        raise ValueError("pending_calls is not a list")
    calls = []
    for position, entry in enumerate(entries):
        if type(entry) is not dict:
            raise ValueError(f"pending call {position} is not an object")
        holder: Any = {}
        if "at" in entry:
            holder = _walk(record["messages"], entry["at"], position)
        call: dict[str, JSONValue] = {}
        for key in _CALL_KEYS:
            if key in entry:
                call[key] = entry[key]
            elif key in holder:
                value = holder[key]
                call[key] = dict(value) if type(value) is dict else value
            else:
                raise ValueError(f"pending call {position} of record {record['seq']} has no {key}")
        if "idempotency_key" in entry:
            call["idempotency_key"] = entry["idempotency_key"]
        elif type(call["id"]) is str and type(run_id) is str:
            call["idempotency_key"] = occurrence_key(run_id, record["seq"], position, call["id"])
        else:
            raise ValueError(f"pending call {position} of record {record['seq']} has no idempotency_key")
        if "error" in entry:
            call["error"] = entry["error"]
        calls.append(call)
    return calls


def _place(messages: JSONValue, path: list[Any]) -> Any:
    """The value at ``path`` (list indices and object keys) in ``messages``, or ``_MISSING``."""
    node = messages
    for step in path:
        in_list = type(step) is int and type(node) is list and 0 <= step < len(node)
        if in_list or (type(step) is str and type(node) is dict and step in node):
            node = node[step]
        else:
            return _MISSING
    return node


def _walk(messages: JSONValue, path: object, position: int) -> dict[str, Any]:
    if type(path) is not list:
        raise ValueError(f"pending call {position}: 'at' is not a list")
    node = _place(messages, path)
    if node is _MISSING:
        raise ValueError(f"pending call {position}: 'at' {path!r} is not a place in the record's messages")
    if type(node) is not dict:
        raise ValueError(f"pending call {position}: 'at' {path!r} is not an object")
    return node


def is_snapshot(record: dict[str, Any]) -> bool:
    """Whether a parsed save record holds every small field (version 2 leaves out ``false``)."""
    return bool(record.get("snapshot", False))


def save_info(record: dict[str, Any], fields: dict[str, Any]) -> SaveInfo:
    """The timeline row of a parsed ``record``, given the small fields folded through it."""
    return SaveInfo(
        seq=record["seq"],
        label=record["label"],
        phase=fields.get("phase", "?"),
        turns=fields.get("turns", 0),
        tokens_used=fields.get("tokens_used", 0),
        messages_added=len(record["messages"]),
        at=fields.get("updated_at", 0.0),
        snapshot=is_snapshot(record),
    )


def fold_fields(fields: dict[str, JSONValue] | None, record: dict[str, Any]) -> dict[str, JSONValue]:
    """The small fields after ``record`` (parsed and checked), given those before it (None: none
    yet): a snapshot replaces them, a delta updates them. Version 2 records are completed with what
    they leave out (``save_seq``, ``message_count``, pending calls in full), so the result has the
    shape ``RunState.from_parts`` takes, for every version. A new dict; the record is not changed.
    Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a record that cannot be folded."""
    own = record["fields"]
    folded = dict(own) if fields is None or is_snapshot(record) else {**fields, **own}
    if record["v"] >= 2:
        folded["save_seq"] = record["seq"]
        folded["message_count"] = record["msg_start"] + len(record["messages"])
        if "pending_calls" in own:
            folded["pending_calls"] = _expand_calls(own["pending_calls"], record, folded.get("run_id"))
    return folded


def summary_of(state: RunState) -> RunSummary:
    return RunSummary(
        state.run_id, state.task, state.phase, state.turns, state.tokens_used, state.save_seq, state.updated_at
    )


def encode_full(state: RunState, label: str) -> EncodedSave:
    """A single snapshot record holding the whole state (used to rewrite a run)."""
    encoder = Encoder()
    return encoder.encode(state, label, force_snapshot=True)


# --------------------------------------------------------------------------- migrations

Migration = Callable[[dict[str, JSONValue]], dict[str, JSONValue]]


class Migrations(Plain):
    """Registered steps that upgrade unbroken's own stored format one version at a time.

    A step receives ``{"fields": {...}, "messages": [...]}`` at version ``n`` and returns it at
    version ``n + 1``. Steps are plain functions registered in code; nothing is loaded from data."""

    __slots__ = ("current", "steps")
    current: int
    steps: dict[int, Migration]

    def __init__(self, current: int = SCHEMA_VERSION, steps: dict[int, Migration] | None = None) -> None:
        self.current = current
        self.steps = {} if steps is None else steps

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
            if step is None and version in LAYOUT_ONLY:
                version = LAYOUT_ONLY[version]  # the same meaning: nothing to change
                run["fields"]["schema_version"] = version
                continue
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
"""unbroken's own format migrations (none registered: 1 -> 2 changed only the layout)."""

LAYOUT_ONLY = {1: 2}
"""Schema versions whose step to the next changed only how records are written, not what they
mean (1 -> 2: fewer repeated bytes, docs/format.md). Their records are read as they are, beside
newer ones in the same run, and are never rewritten for it."""


def _read_natively_as(version: int, migrations: Migrations) -> int:
    """The version whose meaning records at ``version`` have, for deciding on migrations."""
    while version in LAYOUT_ONLY and LAYOUT_ONLY[version] <= migrations.current and version not in migrations.steps:
        version = LAYOUT_ONLY[version]
    return version


def reads_natively(version: int, migrations: Migrations = MIGRATIONS) -> bool:
    """Whether records at ``version`` are read without a migration (the current version and those
    that differ from it only in layout); others go through the whole-run decode."""
    return _read_natively_as(version, migrations) == migrations.current


# --------------------------------------------------------------------------- decoding


class Decoded(Plain):
    """The result of folding a run's records."""

    __slots__ = (
        "_timeline",
        "corrupt_seq",
        "last_seq",
        "message_base",
        "migrated_from",
        "problem",
        "records",
        "state",
    )
    _not_shown = frozenset({"records", "_timeline"})
    _not_compared = frozenset({"_timeline"})
    state: RunState
    last_seq: int
    records: list[dict[str, JSONValue]]
    """The parsed save records, oldest first; ``timeline`` is built from them."""
    corrupt_seq: int | None
    problem: str | None
    migrated_from: int | None
    message_base: int
    """Index of the first message read. A windowed load (``window.load_window``) reads only the
    messages from the compaction window on; ``state.messages[:message_base]`` are then None
    placeholders (the count is kept, the messages stay on disk) and ``records`` start there."""
    _timeline: list[SaveInfo] | None

    def __init__(
        self,
        state: RunState,
        last_seq: int,
        records: list[dict[str, JSONValue]],
        corrupt_seq: int | None = None,
        problem: str | None = None,
        migrated_from: int | None = None,
        message_base: int = 0,
        _timeline: list[SaveInfo] | None = None,
    ) -> None:
        self.state = state
        self.last_seq = last_seq
        self.records = records
        self.corrupt_seq = corrupt_seq
        self.problem = problem
        self.migrated_from = migrated_from
        self.message_base = message_base
        self._timeline = _timeline

    @property
    def timeline(self) -> list[SaveInfo]:
        """The run's save points, oldest first. Built on first use: a resume does not need
        them, and building one object per save point is a tenth of a long run's load time."""
        if self._timeline is None:
            fields: dict[str, Any] = {}
            timeline = []
            for record in self.records:
                fields = dict(record["fields"]) if is_snapshot(record) else {**fields, **record["fields"]}
                timeline.append(save_info(record, fields))
            self._timeline = timeline
        return self._timeline


def decode(
    run_id: str,
    records: Iterable[StoredRecord | Segment] | PackedRecords,
    *,
    recover: bool = False,
    migrations: Migrations = MIGRATIONS,
    fallback: Callable[[], Iterable[StoredRecord]] | None = None,
    keep_records: bool = True,
    sealed: bool = True,
) -> Decoded:
    """Fold a run's records (in seq order) into its state. ``records`` may be packed (one
    buffer); when the packed buffer does not check out, ``fallback`` (if given) reads the
    records one by one and those are judged instead. ``keep_records=False``: each record is
    folded as it is parsed and let go (faster, less memory); ``Decoded.records`` is then empty
    (no timeline): for a resume, which needs only the state. ``records`` may hold ``Segment``s
    (a store's packed older records): with ``keep_records=False`` and ``sealed`` a sealed segment
    is read in one parse (``segment_read``), otherwise record by record (the same state).

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
        return _decode(run_id, records, recover, migrations, fallback, keep_records, sealed)
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
    source: Iterable[StoredRecord | Segment] | PackedRecords,
    recover: bool,
    migrations: Migrations,
    fallback: Callable[[], Iterable[StoredRecord]] | None,
    keep_records: bool = True,
    sealed: bool = True,
) -> Decoded:
    fast: list[dict[str, JSONValue]] | None = None
    records: Iterable[StoredRecord | Segment]
    if isinstance(source, PackedRecords):
        fast = source.parse(migrations.current, RunRecords(run_id))
        # Damage somewhere (or an unexpected order): judge record by record, from the store's
        # ordered read when it gave one, so a misordered buffer is never taken for damage.
        reread = fallback if fallback is not None else source.records
        records = reread() if fast is None else ()
    else:
        records = source
    outcome = _Parsing()
    if fast is not None:
        outcome.count, outcome.last_seq = len(fast), (fast[-1]["seq"] if fast else 0)
    if keep_records:
        parsed = fast if fast is not None else list(_parse_each(run_id, records, migrations.current, outcome))
        outcome.check(run_id, recover)
        try:
            return _fold(run_id, parsed, outcome, migrations, parsed)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise _not_folding(run_id, exc, outcome) from exc
    # Each record folded as it is parsed and then let go (a resume needs no list of them): the
    # checks are the same; damage found after a record that does not fold is reported as that.
    stream = fast if fast is not None else _parse_each(run_id, records, migrations.current, outcome, sealed, lists=True)
    try:
        return _fold(run_id, stream, outcome, migrations, None, recover)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _not_folding(run_id, exc, outcome) from exc
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


class _Parsing:
    """What the record-by-record parse found: the first damage, the last intact seq."""

    __slots__ = ("corrupt_seq", "count", "last_seq", "problem")

    def __init__(self) -> None:
        self.problem: str | None = None
        self.corrupt_seq: int | None = None
        self.last_seq = 0
        self.count = 0

    def check(self, run_id: str, recover: bool) -> None:
        """Raise for damage (unless recovering) or for a run without one intact record."""
        if self.problem is not None and not recover:
            raise CorruptCheckpoint(
                f"{self.problem}; the last intact save point is {self.last_seq}. Load with recover=True (or "
                "`unbroken resume`) to continue from it; nothing was changed",
                last_good_seq=self.last_seq,
            )
        if not self.count:
            raise CorruptCheckpoint(self.problem or f"run {run_id!r} has no save records", last_good_seq=0)


def _not_folding(run_id: str, exc: Exception, outcome: _Parsing) -> CorruptCheckpoint:
    at = f" at save {outcome.last_seq}" if outcome.last_seq else ""
    return CorruptCheckpoint(
        f"run {run_id!r} does not fold into a valid state{at} ({type(exc).__name__}: {exc}); nothing was changed",
        last_good_seq=None,
    )


def _parse_each(
    run_id: str,
    records: Iterable[StoredRecord | Segment],
    current: int,
    outcome: _Parsing,
    segments: bool = False,
    *,
    lists: bool = False,
) -> Iterator[Any]:
    """The records parsed and checked, one by one, up to the first damaged one (noted in
    ``outcome``). Record by record, as the store hands them over: each body is checked, parsed
    and let go, so a store that streams its records (SQLite) never holds the run's bytes beside
    the parsed state. (With orjson this is as fast as one parse of all bodies joined.)

    A ``Segment`` whose seal holds is parsed in one call: with ``segments`` set, its records come
    as one list of typed objects whose ``fields`` are raw JSON text, which only ``_fold`` takes
    (``segment_read.records_of``: msgspec); otherwise as the dicts a record-by-record read gives
    (``segment_read.dicts_of``: orjson, the seal standing for each record's checksum), in one
    list with ``lists`` (which only ``_fold`` takes: it walks them in one loop, as the typed
    ones), else one by one. A segment whose seal does not hold, or whose parse does not check
    out, is cut into its records and each is judged on its own (the careful read, which names
    what is wrong)."""
    iterator = iter(records)
    expected: int | None = None
    run = RunRecords(run_id)
    try:
        for item in iterator:
            pieces: Iterable[StoredRecord]
            if type(item) is Segment:
                from . import segment_read  # (xxhash, and msgspec for ``segments``: imported once a run has segments)

                if segments:
                    packed = segment_read.records_of(item, expected, current, run)
                    if packed is not None:
                        outcome.last_seq = packed[-1].seq
                        outcome.count += len(packed)
                        yield packed  # the segment's records in one list, which _fold walks in one loop
                        expected = outcome.last_seq + 1
                        continue
                else:
                    values = segment_read.dicts_of(item, expected, current, run)
                    if values is not None:
                        outcome.last_seq = item.last
                        outcome.count += len(values)
                        if lists:
                            yield values  # version 2 or later, one version: _fold walks them in one loop
                        else:
                            yield from values
                        expected = item.last + 1
                        continue
                pieces = item.records()
            else:
                pieces = (item,)  # type: ignore[assignment]
            for record in pieces:
                seq = record.seq
                try:
                    if expected is not None and seq != expected:
                        raise ValueError(f"record {expected} is missing")
                    value = run.accept(seq, record.body, record.checksum, current)
                except ValueError as exc:
                    outcome.corrupt_seq = seq
                    outcome.problem = f"save record {seq} of run {run_id!r} is damaged: {exc}"
                    return
                outcome.last_seq = seq
                outcome.count += 1
                yield value
                expected = seq + 1
    finally:
        close = getattr(iterator, "close", None)  # a store's generator: end its read now
        if close is not None:
            close()


_PENDING_FIELDS_CAP = 512
"""With no snapshot for this many records (a large ``snapshot_every``), ``_fold`` folds the
small fields it holds back, so raw fields never keep many segments' bytes alive."""


def _fold(
    run_id: str,
    parsed: Iterable[Any],
    outcome: _Parsing,
    migrations: Migrations,
    kept: list[dict[str, JSONValue]] | None,
    recover: bool | None = None,
) -> Decoded:
    """Fold parsed records: dicts, or a sealed segment's typed records (``_parse_each``).
    ``recover`` given: ``parsed`` is still being parsed, and the damage check
    (``outcome.check``) is made once it is used up.

    Messages are concatenated as they come. The small fields are folded from the newest snapshot
    on, once it is known which that is: a sealed segment's older records never have their fields
    parsed (the snapshot replaces them), and a dict record's are folded as before."""
    messages: list[JSONValue] = []
    fields: dict[str, JSONValue] = {}
    oldest = migrations.current
    calls_from: dict[str, Any] | None = None  # the record that wrote the newest pending_calls
    last: Any = None
    held: list[tuple[Any, bool, Any]] = []  # (record, is a snapshot, its fields) not folded yet
    extend = messages.extend
    for record in parsed:
        if type(record) is list and type(record[0]) is dict:  # a sealed segment's records (dicts_of)
            # Version 2 or later, all one version (dicts_of), shapes checked: as the typed ones below.
            if last is None and not record[0].get("snapshot", False):
                raise ValueError("the first record is not a snapshot")
            newest = -1
            for position, value in enumerate(record):
                if value["msg_start"] != len(messages):
                    raise ValueError(
                        f"record {value['seq']} starts at message {value['msg_start']}, expected {len(messages)}"
                    )
                extend(value["messages"])
                if value.get("snapshot", False):
                    newest = position
            if newest >= 0:
                held.clear()
                calls_from = None
            held.extend((value, value.get("snapshot", False), value["fields"]) for value in record[max(newest, 0) :])
            if len(held) > _PENDING_FIELDS_CAP:
                calls_from = _fold_fields_held(fields, held, calls_from)
            last = record[-1]
            oldest = min(oldest, last["v"])
            continue
        if type(record) is list:  # a sealed segment's records: version 2, shapes checked by the typed parse
            if last is None and not record[0].snapshot:
                raise ValueError("the first record is not a snapshot")
            newest = -1
            for position, packed in enumerate(record):
                if packed.msg_start != len(messages):
                    raise ValueError(
                        f"record {packed.seq} starts at message {packed.msg_start}, expected {len(messages)}"
                    )
                extend(packed.messages)
                if packed.snapshot:
                    newest = position
            if newest >= 0:
                held.clear()
                calls_from = None
            held.extend((packed, packed.snapshot, packed.fields) for packed in record[max(newest, 0) :])
            if len(held) > _PENDING_FIELDS_CAP:
                calls_from = _fold_fields_held(fields, held, calls_from)
            last = record[-1]
            oldest = min(oldest, record[-1].v)  # (records_of: every record of a segment has one version)
            continue
        if type(record) is dict:
            version, start, new, own = record["v"], record["msg_start"], record["messages"], record["fields"]
            # Version 1 records always say whether they are a snapshot; version 2 ones only when so.
            snapshot = bool(record["snapshot"] if version < 2 else record.get("snapshot", False))
        else:  # a sealed segment's record: version 2, its shape checked by the typed parse
            version, start, new, own, snapshot = (
                record.v,
                record.msg_start,
                record.messages,
                record.fields,
                record.snapshot,
            )
        if last is None and not snapshot:
            raise ValueError("the first record is not a snapshot")
        last = record
        if start != len(messages):
            raise ValueError(f"record {_seq_of(record)} starts at message {start}, expected {len(messages)}")
        messages.extend(new)
        if version < oldest:
            oldest = version
        if snapshot:
            if type(own) is dict and own.get("run_id", run_id) != run_id:  # a snapshot names its run
                raise ValueError(f"record {_seq_of(record)} is a save of run {own.get('run_id')!r}")
            held.clear()
            calls_from = None
        held.append((record, snapshot, own))
        if len(held) > _PENDING_FIELDS_CAP:
            calls_from = _fold_fields_held(fields, held, calls_from)
    calls_from = _fold_fields_held(fields, held, calls_from)
    if last is not None and type(last) is not dict:
        last = {"v": last.v, "seq": last.seq}
    if recover is not None:
        outcome.check(run_id, recover)
    assert last is not None  # (outcome.check: at least one record)
    if last["v"] >= 2:
        # What version 2 leaves out is derived once, from the last record, not per record: the
        # msg_start chain and the unbroken seq have already checked every record's place.
        fields["save_seq"] = last["seq"]
        fields["message_count"] = len(messages)
    if calls_from is not None and calls_from["v"] >= 2:
        fields["pending_calls"] = _expand_calls(fields["pending_calls"], calls_from, run_id)
    accept_fields(fields)
    if fields["message_count"] != len(messages):
        raise ValueError(f"state says {fields['message_count']} messages, records hold {len(messages)}")
    if fields["run_id"] != run_id:
        raise ValueError(f"records belong to run {fields['run_id']!r}")
    migrated_from = None
    oldest = _read_natively_as(oldest, migrations)
    if oldest < migrations.current:
        migrated_from = oldest
        upgraded = migrations.upgrade({"fields": fields, "messages": messages}, oldest, run_id)
        fields, messages = upgraded["fields"], upgraded["messages"]
    state = RunState.from_parts(fields, messages)
    return Decoded(
        state=state,
        last_seq=last["seq"],
        records=kept if kept is not None else [],
        corrupt_seq=outcome.corrupt_seq,
        problem=outcome.problem,
        migrated_from=migrated_from,
    )


def _seq_of(record: Any) -> object:
    return record["seq"] if type(record) is dict else record.seq


def _fold_fields_held(
    fields: dict[str, JSONValue], held: list[tuple[Any, bool, Any]], calls_from: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Fold the small fields of ``held`` records, in order, into ``fields`` (a snapshot replaces
    them, a delta updates them) and empty ``held``. Returns the record that wrote the newest
    ``pending_calls``, as ``_expand_calls`` takes it."""
    for record, snapshot, own in held:
        if type(own) is not dict:  # a sealed segment's record: its fields as raw JSON text
            own = loads(bytes(own))
            if type(own) is not dict:
                raise ValueError(f"the fields of record {record.seq} are not an object")
        if snapshot:
            fields.clear()
        fields.update(own)
        if "pending_calls" in own:
            calls_from = (
                record if type(record) is dict else {"v": record.v, "seq": record.seq, "messages": record.messages}
            )
    held.clear()
    return calls_from


def peek_version(record: StoredRecord) -> int | None:
    """The schema version a record was written with, or None if it cannot be read."""
    try:
        value = loads(record.body)
    except (ValueError, RecursionError):
        return None
    version = value.get("v") if isinstance(value, dict) else None
    return version if type(version) is int else None
