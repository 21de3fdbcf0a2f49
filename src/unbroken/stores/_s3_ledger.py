"""The S3 store's effect ledger: one object per entry, plus the entries of the last save, which
live in the run head until they are copied to their objects.

A save's ledger entries must appear exactly when its record does (a writer refused at the head
writes none; a reader who sees the record sees its entries). Object storage has no multi-object
write, so the save's entries go into the head it commits (``head["pending"]``) and are copied to
their own objects right after; the next save of the run drops them from the head, after making
sure they were copied (a writer that crashed in between leaves them for the next one). Every
read looks in the head first. A ledger write to a key still pending in the head first settles
the head (copies its entries, then clears them by compare-and-set) so the newer entry wins.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ._s3_layout import Head, parse_entry
from ._s3_objects import PreconditionFailed
from .backend import Refused, SealedEntry

if TYPE_CHECKING:
    from ._s3_objects import Bucket

_SETTLE_ATTEMPTS = 20


def sealed_json(sealed: SealedEntry) -> dict[str, Any]:
    return {"checksum": sealed.checksum, "entry": sealed.entry.to_json()}


class S3Ledger:
    """The ledger primitives of ``S3Store`` (mixed into it; uses its head helpers)."""

    objects: Bucket

    def _fetch_head(self, run_id: str) -> tuple[Head, str] | None:
        raise NotImplementedError

    def _put_head(self, run_id: str, head: Head, etag: str | None) -> bool:
        raise NotImplementedError

    @staticmethod
    def _entry_name(run_id: str, key: str) -> str:
        return f"runs/{run_id}/led/{quote(key, safe='')}"

    def _put_entry_object(self, sealed: SealedEntry, *, create_only: bool = False) -> None:
        body = json.dumps(sealed_json(sealed)).encode()
        self.objects.put(self._entry_name(sealed.entry.run_id, sealed.entry.key), body, create_only=create_only)

    def _copy_pending(self, head: Head) -> None:
        """Write the head's pending entries to their objects (idempotent)."""
        pending = [parse_entry(json.dumps(item).encode()) for item in head.get("pending") or []]
        self.objects.parallel(self._put_entry_object, pending)

    @staticmethod
    def _pending(head: Head | None, key: str) -> SealedEntry | None:
        for item in (head or {}).get("pending") or []:
            if item["entry"]["key"] == key:
                return parse_entry(json.dumps(item).encode())
        return None

    def _settle(self, run_id: str, fence: int | None) -> Head | None:
        """Copy the head's pending entries to their objects and clear them from the head (by
        compare-and-set, under ``fence`` when given). Returns the head it left."""
        for _ in range(_SETTLE_ATTEMPTS):
            found = self._fetch_head(run_id)
            if found is None:
                return None
            head, etag = found
            if fence is not None and int(head["fence"]) != fence:
                raise Refused
            if not head.get("pending"):
                return head
            self._copy_pending(head)
            if self._put_head(run_id, {**head, "pending": []}, etag):
                return head
        raise Refused

    def _fenced(self, run_id: str, fence: int | None) -> Head | None:
        found = self._fetch_head(run_id)
        if fence is not None and (int(found[0]["fence"]) if found else 0) != fence:
            raise Refused
        return found[0] if found is not None else None

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        run_id, key = sealed.entry.run_id, sealed.entry.key
        pending = self._pending(self._fenced(run_id, fence), key)
        if pending is not None:
            return pending
        for attempt in range(3):
            try:
                self._put_entry_object(sealed, create_only=True)
                break
            except PreconditionFailed:
                stored = self.get_entry(run_id, key)
                if stored is not None:
                    return stored
                if attempt == 2:  # 409s only: a racing insert of the key keeps failing midway
                    raise Refused from None
        # Checked again after the write: a writer that lost its lease in between is told so and
        # does not act on the entry (the new owner finds it pending, never done).
        self._fenced(run_id, fence)
        return None

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        run_id = sealed.entry.run_id
        head = self._fenced(run_id, fence)
        if self._pending(head, sealed.entry.key) is not None:
            self._settle(run_id, fence)
        self._put_entry_object(sealed)
        self._fenced(run_id, fence)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        found = self._fetch_head(run_id)
        pending = self._pending(found[0] if found else None, key)
        if pending is not None:
            return pending
        stored = self.objects.get(self._entry_name(run_id, key))
        return parse_entry(stored[0]) if stored is not None else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        found = self._fetch_head(run_id)
        names = self.objects.names(f"runs/{run_id}/led/")
        bodies = self.objects.parallel(self.objects.get, names)
        entries = {s.entry.key: s for s in (parse_entry(body[0]) for body in bodies if body is not None)}
        for item in (found[0] if found else {}).get("pending") or []:
            sealed = parse_entry(json.dumps(item).encode())
            entries[sealed.entry.key] = sealed
        return list(entries.values())

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        self._settle(run_id, None)
        self.objects.delete([self._entry_name(run_id, key) for key in keys])
