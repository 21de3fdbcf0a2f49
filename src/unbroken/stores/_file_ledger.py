"""The effect ledger of a file store: one JSON file per idempotency key in ``runs/<run_id>/effects/``.

An insert reads and creates the entry under the run's exclusive lock, so racing inserts (threads
or processes) create exactly one entry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ._durable import fsync_dir, translating
from ._file_format import effect_name, entry_bytes, read_entry
from ._file_runs import RunDirectories
from .backend import SealedEntry


class LedgerFiles(RunDirectories):
    """The effect-ledger primitives of ``FileStore``."""

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        with self._writing(sealed.entry.run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, fence)
            existing = read_entry(run_dir / "effects" / effect_name(sealed.entry.key))
            if existing is not None:
                return existing
            self._write_file(run_dir / "effects", effect_name(sealed.entry.key), entry_bytes(sealed))
        return None

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        with self._writing(sealed.entry.run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, fence)
            self._write_file(run_dir / "effects", effect_name(sealed.entry.key), entry_bytes(sealed))

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        path = self._run_dir(run_id) / "effects" / effect_name(key)
        with translating("read", path):
            return read_entry(path)

    def _entries(self, run_dir: Path) -> list[tuple[Path, SealedEntry]]:
        effects = run_dir / "effects"
        try:
            names = sorted(os.listdir(effects))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue  # temp files of a writer
            sealed = read_entry(effects / name)
            if sealed is not None:
                found.append((effects / name, sealed))
        return found

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        run_dir = self._run_dir(run_id)
        with translating("read the effect ledger in", run_dir):
            return [sealed for _, sealed in self._entries(run_dir)]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        with self._holding(run_id, "clean the effect ledger of", exclusive=True) as run_dir:
            if run_dir is None:
                return
            for key in keys:
                try:
                    os.unlink(run_dir / "effects" / effect_name(key))
                except FileNotFoundError:
                    continue
            fsync_dir(run_dir / "effects")
