"""What a save record must be to be accepted: one rule, checked at write and at read.

A save is acknowledged only if every load would accept it, so both sides use this module:

* ``accept``: one stored record (size cap, CRC-32, JSON, the record's shape, its schema version).
  Every reader calls it (the whole-run decode, the windowed and paged reads, watch, segment
  packing); its fast path is the one-expression check of an intact record, and anything else
  goes to ``_problem``, which names what is wrong. ``accept_parsed`` is the shape part alone, for
  a reader that parsed many records in one call (``codec.PackedRecords``); ``accept_segment`` the
  typed parse of a sealed segment (msgspec), built from the same ``RECORD_SHAPE``.
* ``accept_fields``: the small fields of a state (counters, phase, containers, pending calls).
  The encoder calls it on the fields it is about to write (``codec.Encoder``), every reader on
  the fields it folded, so a state a load would refuse is refused before it is saved.

docs/format.md ("Acceptance") is the specification of these rules.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from .errors import EncryptionKeyMissing, IncompatibleSchema
from .state import PHASES, RESULT_HOWS, JSONValue

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A single save record larger than this is refused before it is parsed."""

MAX_COUNT = 2**53 - 1
"""The largest counter (turns, tokens, seq...) a record may hold: every JSON reader (also those
that read numbers as doubles, like JavaScript) reads integers up to here exactly."""

loads = orjson.loads
SEALED_RAW = b"\xffA256GCM"
"""How a save record sealed as raw bytes starts (``encryption._cipher``: a store that keeps bytes
as they are, SQLite): 0xFF never starts UTF-8 text, so no JSON record is ever taken for one."""
"""The one JSON parser of stored bytes (bytes or str in; ``ValueError`` on bad JSON)."""

RECORD_SHAPE: tuple[tuple[str, type, bool], ...] = (
    ("v", int, True),
    ("seq", int, True),
    ("label", str, True),
    ("msg_start", int, True),
    ("messages", list, True),
    ("fields", dict, True),
    ("snapshot", bool, False),
)
"""The keys of a save record, their JSON types and whether each is required (docs/format.md).
``intact`` is this table as one expression; a test checks that the two agree."""


REFUSED = "refused: "
"""A reader that found a record unacceptable before the loader saw it (a sealed record that does
not decrypt, a segment index that does not read) hands it on with ``REFUSED`` + the reason in
place of its checksum: ``accept`` then refuses it with that reason, as that record's damage."""


def checksum(body: str | bytes | memoryview, seed: int = 0) -> str:
    """CRC-32 of a record's UTF-8 bytes, as 8 hex digits; from ``seed`` (a run's ``run_seed``:
    the record is bound to that run), or from 0 (the plain CRC-32 of records written before)."""
    data = body.encode() if isinstance(body, str) else body
    return zlib.crc32(data, seed).to_bytes(4, "big").hex()  # (~2x an f-string's)


_BIND_RECORDS = True
"""Whether records are bound to their run (``run_seed``). Only the simulator's mutation
``run_binding`` turns it off, to show what the binding catches."""


def run_seed(run_id: str) -> int:
    """The CRC-32 every record checksum of run ``run_id`` starts from: that of ``unbroken run``
    NUL run id NUL (UTF-8), so a record's checksum is the CRC-32 of those bytes followed by its
    body. A record copied into another run fails its check there, with no byte more stored."""
    if not _BIND_RECORDS:
        return 0
    return zlib.crc32(b"unbroken run\0%s\0" % run_id.encode("utf-8", "surrogatepass"))


def accept(seq: int, body: str | bytes, check: str, current: int, seed: int = 0) -> dict[str, Any]:
    """Save record ``seq`` parsed, if it is acceptable: at most ``MAX_RECORD_BYTES``, its CRC-32
    from ``seed`` is ``check``, it is JSON and has the shape of ``RECORD_SHAPE`` at a schema
    version up to ``current``. Raises ``ValueError`` saying what is wrong, or
    ``IncompatibleSchema`` for a record from a newer schema. A run's reader calls it through
    ``RunRecords``, which knows which seed a record of the run must have."""
    if len(body) <= MAX_RECORD_BYTES:
        # The fast path, for the intact record (20,000 of them in a long resume).
        try:  # (a str with a lone surrogate cannot be encoded: judged by _problem)
            raw = body if type(body) is bytes else body.encode()  # type: ignore[union-attr]
            if f"{zlib.crc32(raw, seed):08x}" == check:
                value = loads(raw)
                if intact(value, seq, current):
                    return value  # type: ignore[no-any-return]
        except (ValueError, RecursionError):
            pass
    raise ValueError(_problem(seq, body, check, current, seed))


class RunRecords:
    """The checksum rule of one run's records, read in seq order (docs/format.md, "Checksums").
    A record's checksum starts from the run's seed (``run_seed``): one copied from another run
    fails it. Records written before runs were bound (plain CRC-32) are accepted until the
    run's first bound record; every record after a bound one must be bound, so a plain record
    copied into a run written by this version is refused. Not for sharing between runs."""

    __slots__ = ("plain", "seed")

    def __init__(self, run_id: str) -> None:
        self.seed = run_seed(run_id)
        self.plain = True
        """No bound record read yet: a plain one is still a record written before."""

    def accept(self, seq: int, body: str | bytes, check: str, current: int) -> dict[str, Any]:
        """``acceptance.accept`` under the run's rule; raises as it does."""
        if self.plain and self.seed:
            try:  # an old run's records are plain: its reads pay one CRC a record
                return accept(seq, body, check, current)
            except ValueError:
                if _crc_is(body, check, 0):
                    raise  # a plain record, damaged otherwise: named as such
            value = accept(seq, body, check, current, self.seed)
            self.plain = False
            return value
        return accept(seq, body, check, current, self.seed)

    def matches(self, body: bytes | memoryview, check: str) -> bool:
        """Whether ``body``'s checksum under the run's rule is ``check`` (the CRC only), as
        ``accept`` judges it (a reader that parses many records at once)."""
        if f"{zlib.crc32(body, self.seed):08x}" == check:
            self.plain = False
            return True
        return self.plain and f"{zlib.crc32(body):08x}" == check


def _crc_is(body: str | bytes, check: str, seed: int) -> bool:
    try:
        return checksum(body, seed) == check
    except UnicodeEncodeError:  # (a lone surrogate: no record's text)
        return False


def accept_parsed(value: object, seq: int, current: int) -> dict[str, Any]:
    """``value``, already parsed (its bytes checked), if it has the shape of save record ``seq``
    (``accept`` without the byte checks). Raises like ``accept``."""
    if intact(value, seq, current):
        return value  # type: ignore[return-value]
    raise ValueError(_shape_problem(value, seq, current))


def intact(value: Any, seq: int, current: int) -> bool:
    """Whether parsed ``value`` has the shape of save record ``seq`` at a version up to
    ``current``: ``RECORD_SHAPE`` in one expression (the hot path)."""
    try:  # (subscripts, not .get: a missing key is a KeyError, and each lookup is a third cheaper)
        return (
            type(value) is dict
            and type(value["v"]) is int
            and value["v"] <= current
            and type(value["seq"]) is int
            and value["seq"] == seq
            and type(value["label"]) is str
            and type(value["msg_start"]) is int
            and type(value["messages"]) is list
            and type(value["fields"]) is dict
            and type(value.get("snapshot", False)) is bool
        )
    except KeyError:
        return False


def intact_run(values: list[Any], first: int, version: int) -> bool:
    """Whether every one of ``values`` is ``intact`` as save record ``first``, ``first + 1``, ...
    and all are at schema ``version`` (a sealed segment's records, ``segment_read.dicts_of``):
    ``intact``'s expression in one loop, without a call per record (~30 % fewer instructions
    over a 1,000-turn run's 1,792 packed records)."""
    seq = first
    try:
        for value in values:
            if not (
                type(value) is dict
                and type(value["v"]) is int
                and value["v"] == version
                and type(value["seq"]) is int
                and value["seq"] == seq
                and type(value["label"]) is str
                and type(value["msg_start"]) is int
                and type(value["messages"]) is list
                and type(value["fields"]) is dict
                and type(value.get("snapshot", False)) is bool
            ):
                return False
            seq += 1
    except KeyError:
        return False
    return True


def _problem(seq: int, body: str | bytes, check: str, current: int, seed: int = 0) -> str:
    """What is wrong with a record ``accept`` refused (raises ``IncompatibleSchema`` for a newer one)."""
    if check.startswith(REFUSED):
        return check[len(REFUSED) :]
    if len(body) > MAX_RECORD_BYTES:
        return f"record is {len(body)} bytes, over the {MAX_RECORD_BYTES} cap"
    try:
        raw = body if isinstance(body, bytes) else body.encode()
    except UnicodeEncodeError:
        return "record is not UTF-8 text"
    if checksum(raw, seed) != check:
        if not seed:
            return "checksum mismatch (torn or corrupted write)"
        if checksum(raw) != check:
            return "checksum mismatch (torn or corrupted write, or a record of another run)"
        if raw.startswith(SEALED_RAW):  # a sealed record: bound by its own associated data
            raise _key_missing(seq, "A256GCM")
        try:
            value = loads(raw)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) and "enc" in value and "v" not in value:
            return _shape_problem(value, seq, current)  # a sealed envelope: bound by its own associated data
        if isinstance(value, dict) and type(value.get("v")) is int and value["v"] > current:
            return _shape_problem(value, seq, current)  # a newer schema: IncompatibleSchema, not damage
        return "checksum is not bound to this run, after records that are (a record copied from another run)"
    if raw.startswith(SEALED_RAW):
        raise _key_missing(seq, "A256GCM")
    try:
        value = loads(raw)
    except RecursionError:
        return "nesting too deep"
    except ValueError as exc:
        return f"record is not JSON ({exc})"
    return _shape_problem(value, seq, current)


def _shape_problem(value: object, seq: int, current: int) -> str:
    if not isinstance(value, dict):
        return "record is not a JSON object"
    if "enc" in value and "v" not in value:  # a sealed record (unbroken.stores.encrypted), read without keys
        raise _key_missing(seq, value["enc"])
    version = value.get("v")
    if type(version) is not int:
        return "record has no schema version"
    if version > current:
        raise IncompatibleSchema(
            f"save record {seq} was written with checkpoint schema {version}, newer than the {current} "
            "this unbroken understands; upgrade unbroken to load it (nothing was changed)"
        )
    found = value.get("seq")
    if type(found) is not int or found != seq:
        return f"record claims seq {found!r}"
    for key, kind, required in RECORD_SHAPE:
        if key not in value and not required:
            continue
        if key not in value:
            return f"record lacks {key}"
        if type(value[key]) is not kind:
            return f"record's {key} is a {_json_type(value[key])}, not a {_json_type(kind())}"
    return "record is not a save record"  # (unreachable while intact and RECORD_SHAPE agree)


def _key_missing(seq: int, algorithm: object) -> EncryptionKeyMissing:
    return EncryptionKeyMissing(
        f"save record {seq} is encrypted at rest ({algorithm!r}) and this store was opened without a key "
        "provider: open it with its keys (open_store(url, encryption=...), or set UNBROKEN_ENCRYPTION_KEY or "
        "UNBROKEN_ENCRYPTION_KEY_FILE)"
    )


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- sealed segments

_segment_decoder: Any = None


def accept_segment(bodies: bytes) -> list[Any] | None:
    """The records of a sealed segment's ``bodies`` (a JSON array of records) parsed in one call,
    typed as ``RECORD_SHAPE`` says, with each record's ``fields`` kept as raw JSON text (parsed
    when the fold needs it: it checks then that they are an object). None if any record does not
    have the shape; the caller then reads the records one by one with ``accept``."""
    decoder = _segment_decoder if _segment_decoder is not None else _build_segment_decoder()
    try:
        return decoder.decode(bodies)  # type: ignore[no-any-return]
    except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError are ValueErrors
        return None


def _build_segment_decoder() -> Any:
    global _segment_decoder
    import msgspec  # (imported once a run has segments: ``import unbroken`` does not pay for it)

    spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for key, kind, required in RECORD_SHAPE:
        typed: Any = msgspec.Raw if key == "fields" else kind
        spec.append((key, typed) if required else (key, typed, kind()))
    # defstruct, not a class body: this module's annotations are strings, msgspec needs types.
    packed_record = msgspec.defstruct("PackedRecord", spec)
    _segment_decoder = msgspec.json.Decoder(list[packed_record])  # type: ignore[valid-type]
    return _segment_decoder


# --------------------------------------------------------------------------- the small fields

REQUIRED_FIELDS = (
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
_COUNT_FIELDS = ("schema_version", "save_seq", "turns", "tokens_used", "message_count")
_OPTIONAL_COUNTS = ("business_state_version", "summary_upto", "resumes")
_CONTAINERS = (
    ("business_state", dict),
    ("pending_calls", list),
    ("results", dict),
    ("resolutions", dict),
    ("attempts", dict),
    ("usage", dict),
)


def accept_fields(fields: dict[str, JSONValue]) -> None:
    """Raise ``ValueError`` naming the field unless ``fields`` (the small fields of a state, with
    ``save_seq`` and ``message_count``) make a state every load accepts. Called by the encoder on
    what it is about to write and by every reader on what it folded."""
    if _fields_intact(fields):
        return
    _explain_fields(fields)
    raise ValueError("fields are not a state")  # (unreachable while the two paths agree)


_PHASES = frozenset(PHASES)
_NUMBERS = (int, float)


def _fields_intact(fields: dict[str, Any]) -> bool:
    """The rules of ``_explain_fields`` for a valid state, in one expression (every save runs it)."""
    get = fields.get
    calls = get("pending_calls", ())  # (absent: the empty tuple, which no JSON value equals)
    return (
        type(n := get("schema_version")) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("save_seq")) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("turns")) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("tokens_used")) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("business_state_version", 0)) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("summary_upto", 0)) is int
        and 0 <= n <= MAX_COUNT
        and type(n := get("resumes", 0)) is int
        and 0 <= n <= MAX_COUNT
        and type(count := get("message_count")) is int
        and 0 <= count <= MAX_COUNT
        and type(n := get("history_checked", 0)) is int
        and 0 <= n <= count
        and type(phase := get("phase")) is str
        and phase in _PHASES
        and type(get("run_id")) is str
        and type(get("task")) is str
        and type(get("summary")) in _SUMMARY_TYPES
        and type(get("business_state", _EMPTY)) is dict
        and type(results := get("results", _EMPTY)) is dict
        and (not results or _results_intact(results))
        and type(resolutions := get("resolutions", _EMPTY)) is dict
        and type(attempts := get("attempts", _EMPTY)) is dict
        and ((not resolutions and not attempts) or _per_call_intact(resolutions, attempts))
        and type(get("usage", _EMPTY)) is dict
        and type(get("created_at")) in _NUMBERS
        and type(get("updated_at")) in _NUMBERS
        and (calls == () or (type(calls) is list and (not calls or _calls_intact(calls))))
    )


fields_intact = _fields_intact
"""Whether ``accept_fields(fields)`` passes, without raising: its one-expression rule alone (the
encoder calls it first at every save, and ``accept_fields`` only when it says False)."""

_EMPTY: dict[str, Any] = {}
_SUMMARY_TYPES = (str, type(None))  # a compaction's summary text, or none (absent: none)


_HOWS = frozenset(RESULT_HOWS)


def _results_intact(results: dict[str, Any]) -> bool:
    for result in results.values():
        if not (
            type(result) is dict
            and type(result.get("call_id")) is str
            and type(result.get("content")) is str
            and type(result.get("is_error")) is bool
            and type(how := result.get("how", "executed")) is str
            and how in _HOWS
        ):
            return False
    return True


def _per_call_intact(resolutions: dict[str, Any], attempts: dict[str, Any]) -> bool:
    for resolution in resolutions.values():
        if type(resolution) is not str:
            return False
    for count in attempts.values():  # noqa: SIM110 - a loop, not a generator: every save runs it
        if type(count) is not int or not 0 <= count <= MAX_COUNT:
            return False
    return True


def _calls_intact(calls: list[Any]) -> bool:
    keys = set()
    for call in calls:
        if not (
            type(call) is dict
            and type(call.get("id")) is str
            and type(call.get("name")) is str
            and type(call.get("input")) is dict
            and type(call.get("idempotency_key")) is str
            and (call.get("error") is None or type(call["error"]) is str)
        ):
            return False
        keys.add(call["idempotency_key"])
    return len(keys) == len(calls)


def _explain_fields(fields: dict[str, JSONValue]) -> None:
    """Raise ``ValueError`` naming the first field that breaks the rules (the careful path)."""
    for name in REQUIRED_FIELDS:
        if name not in fields:
            raise ValueError(f"fields missing: {', '.join(n for n in REQUIRED_FIELDS if n not in fields)}")
    for name in _COUNT_FIELDS:
        _count(fields, name, fields[name])
    for name in _OPTIONAL_COUNTS:
        if name in fields:
            _count(fields, name, fields[name])
    if fields["phase"] not in PHASES:
        raise ValueError(f"field phase is {fields['phase']!r}, not one of {', '.join(PHASES)}")
    for name in ("run_id", "task"):
        if type(fields[name]) is not str:
            raise ValueError(f"field {name} is not a string")
    if type(fields.get("summary")) not in _SUMMARY_TYPES:
        raise ValueError(f"field summary is {_short(fields.get('summary'))}, not a string or null")
    for name, kind in _CONTAINERS:
        if name in fields and type(fields[name]) is not kind:
            raise ValueError(f"field {name} is a {_json_type(fields[name])}, not a {_json_type(kind())}")
    for name in ("created_at", "updated_at"):
        value = fields[name]
        if type(value) not in (int, float):
            raise ValueError(f"field {name} is {value!r}, not a number")
    checked = fields.get("history_checked", 0)
    if type(checked) is not int or not 0 <= checked <= fields["message_count"]:
        raise ValueError(f"field history_checked is {checked!r}, not a message index")
    calls = fields.get("pending_calls")
    if calls:
        _accept_calls(calls)
    _accept_per_call(fields)


def _accept_per_call(fields: dict[str, JSONValue]) -> None:
    """``results``, ``resolutions`` and ``attempts`` (each an object by idempotency key): a result
    a whole ``ToolResult.to_json``, a resolution a string, an attempt count a count."""
    for key, result in dict(fields.get("results") or {}).items():
        where = f"field results[{key!r}]"
        if type(result) is not dict:
            raise ValueError(f"{where} is {_short(result)}, not an object")
        for name, kind in (("call_id", str), ("content", str), ("is_error", bool)):
            if type(result.get(name)) is not kind:
                raise ValueError(f"{where}.{name} is {_short(result.get(name))}, not a {_json_type(kind())}")
        how = result.get("how", "executed")
        if type(how) is not str or how not in _HOWS:
            raise ValueError(f"{where}.how is {_short(how)}, not one of {', '.join(RESULT_HOWS)}")
    for key, resolution in dict(fields.get("resolutions") or {}).items():
        if type(resolution) is not str:
            raise ValueError(f"field resolutions[{key!r}] is {_short(resolution)}, not a string")
    for key, count in dict(fields.get("attempts") or {}).items():
        if type(count) is not int or not 0 <= count <= MAX_COUNT:
            raise ValueError(f"field attempts[{key!r}] is {_short(count)}, not an integer from 0 to 2**53-1")


def _count(fields: dict[str, JSONValue], name: str, value: object) -> None:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"field {name} is {_short(value)}, not an integer from 0 to 2**53-1")


def _accept_calls(calls: list[Any]) -> None:
    """Each pending call a whole call (``ToolCall.to_json``), and no two with one idempotency key
    (results are kept by that key: a second call under it would pass for answered)."""
    keys: set[str] = set()
    for position, call in enumerate(calls):
        where = f"field pending_calls[{position}]"
        if type(call) is not dict:
            raise ValueError(f"{where} is not an object")
        for key, kind in (("id", str), ("name", str), ("input", dict), ("idempotency_key", str)):
            if type(call.get(key)) is not kind:
                raise ValueError(f"{where}.{key} is {_short(call.get(key))}, not a {_json_type(kind())}")
        error = call.get("error")
        if error is not None and type(error) is not str:
            raise ValueError(f"{where}.error is {_short(error)}, not a string or null")
        if call["idempotency_key"] in keys:
            raise ValueError(f"{where}.idempotency_key {call['idempotency_key']!r} is already another call's")
        keys.add(call["idempotency_key"])


def _short(value: object) -> str:
    if type(value) is int and not -(2**64) < value < 2**64:  # (repr of a 5,000-digit int raises)
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "MAX_COUNT",
    "MAX_RECORD_BYTES",
    "RECORD_SHAPE",
    "REQUIRED_FIELDS",
    "SEALED_RAW",
    "RunRecords",
    "accept",
    "accept_fields",
    "accept_parsed",
    "accept_segment",
    "checksum",
    "loads",
    "run_seed",
]
