"""Where a run's data key is kept: one reserved effect-ledger entry per run.

The entry (key ``DATA_KEY``) is written insert-if-absent by the first write of an encrypted run
(a save, a ledger entry, a submission), so every store keeps it through the seam it already
has, two writers of a new run agree on one data key, and ``remove_run`` drops it with the run.
Its result holds ``{"wrapped": ENVELOPE, "from_seq": N, "plain_entries": B}``: the data key
wrapped by the user's key provider (the envelope names the key id), the first save sealed under
it (records from there on must be sealed: a plaintext one there is a replacement, refused on
load), and whether the run held ledger entries before it had a data key (if not, every ledger
result in it must be sealed: a plaintext one is a replacement, refused on read; an entry written
before this field existed counts as ``from_seq > 1``).
The entry is checksummed like every ledger entry; it holds nothing readable without the
user's key.
"""

from __future__ import annotations

import json
from dataclasses import replace

from .. import clock
from .._plain import Frozen
from ..errors import CorruptCheckpoint, EncryptionKeyMissing, UnbrokenError
from ..state import JSONValue, LedgerEntry, ToolResult
from .backend import Backend, SealedEntry, entry_checksum, seal

DATA_KEY = "unbroken.data-key"
"""The reserved ledger key of a run's wrapped data key (never an idempotency key: those are
``ub_`` + hex or the caller's ``idempotency_key(run, call)``, refused here for a user entry)."""
TOOL = "unbroken.encryption"


class KeyRecord(Frozen):
    """What the reserved entry says: the wrapped data key and the first sealed save. (A plain
    class, not a dataclass: a resume of an encrypted run imports it before its first record.)"""

    __slots__ = ("envelope", "from_seq", "plain_entries")
    envelope: dict[str, JSONValue]
    from_seq: int
    plain_entries: bool
    """Whether ledger results in clear may be in the run (written before its data key was made)."""

    def __init__(self, envelope: dict[str, JSONValue], from_seq: int, plain_entries: bool) -> None:
        object.__setattr__(self, "envelope", envelope)
        object.__setattr__(self, "from_seq", from_seq)
        object.__setattr__(self, "plain_entries", plain_entries)

    def text(self) -> str:
        value = {"wrapped": self.envelope, "from_seq": self.from_seq, "plain_entries": self.plain_entries}
        return json.dumps(value, sort_keys=True)

    @property
    def kid(self) -> str:
        kid = self.envelope.get("kid")
        return kid if isinstance(kid, str) else "?"


def key_entry(run_id: str, record: KeyRecord) -> SealedEntry:
    """The reserved ledger entry holding ``record``, sealed (checksummed) for the store."""
    now = clock.wall()
    text = record.text()
    entry = LedgerEntry(
        run_id=run_id,
        key=DATA_KEY,
        call_id="",
        tool=TOOL,
        args_hash="",
        status="succeeded",
        result=ToolResult(call_id="", content=text),
        created_at=now,
        updated_at=now,
    )
    return seal(entry)


def rewrapped(sealed: SealedEntry, envelope: dict[str, JSONValue]) -> SealedEntry:
    """The same reserved entry with a new envelope (rotation): the data key inside is the same."""
    record = read_key_entry(sealed.entry.run_id, sealed)
    result = ToolResult(call_id="", content=record.replace(envelope=envelope).text())
    return seal(replace(sealed.entry, result=result, updated_at=clock.wall()))


def read_key_entry(run_id: str, sealed: SealedEntry) -> KeyRecord:
    """The ``KeyRecord`` in a stored reserved entry; ``CorruptCheckpoint`` if it is damaged."""
    entry = sealed.entry
    damaged = CorruptCheckpoint(
        f"the data key entry of run {run_id!r} is damaged (edited, or not one unbroken wrote); nothing was "
        "changed. Restore it from a backup: without it the run's encrypted records cannot be read",
        last_good_seq=None,
    )
    if entry.run_id != run_id or entry.key != DATA_KEY or entry.result is None:
        raise damaged
    if sealed.checksum is not None and sealed.checksum != entry_checksum(entry):
        raise damaged
    try:
        value = json.loads(entry.result.content)
    except ValueError:
        raise damaged from None
    if not isinstance(value, dict):
        raise damaged
    envelope, from_seq = value.get("wrapped"), value.get("from_seq")
    if not isinstance(envelope, dict) or type(from_seq) is not int or from_seq < 1:
        raise damaged
    plain_entries = value.get("plain_entries", from_seq > 1)
    if type(plain_entries) is not bool:
        raise damaged
    return KeyRecord(envelope, from_seq, plain_entries)


def needs_key(backend: Backend, run_id: str, found: EncryptionKeyMissing) -> EncryptionKeyMissing:
    """``found`` (a sealed record met without keys) naming the key id the run's data key is
    wrapped under, read from its reserved entry (clear: the id is not secret); or, when this
    store holds no such entry, saying where it must be (a separate key store). Every read path
    that can meet a sealed record without keys raises through here (whole loads, paged reads)."""
    try:
        stored = backend.get_entry(run_id, DATA_KEY)
        kid = None if stored is None else read_key_entry(run_id, stored).kid
    except UnbrokenError:
        return found
    if kid is None:
        return EncryptionKeyMissing(
            f"run {run_id!r} is encrypted at rest and this store holds no data key entry for it (it is kept in a "
            "separate key store, or was lost): open it as EncryptedStore(store, keys, key_store=...) with the key "
            f"store and keys its runs were written with: {found}"
        )
    return EncryptionKeyMissing(f"run {run_id!r} is encrypted at rest under key id {kid!r}: {found}")
