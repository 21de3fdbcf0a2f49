"""The effect ledger of a file store: one JSON file per idempotency key in ``runs/<run_id>/effects/``.

A claim reads and creates the entry under the run's exclusive lock, so racing claims (threads or
processes) create exactly one entry.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ..state import TERMINAL_PHASES, LedgerEntry, check_run_id
from ._durable import fsync_dir, translating
from ._file_format import effect_name, pretty, read_entry
from ._file_runs import RunDirectories


class LedgerFiles(RunDirectories):
    """The effect-ledger methods of ``FileStore``."""

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        run_id = check_run_id(entry.run_id)
        with self._writing(run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            existing = read_entry(run_dir / "effects" / effect_name(entry.key))
            if existing is not None:
                return existing, False
            self._write_file(run_dir / "effects", effect_name(entry.key), pretty(entry.to_json()))
        return replace(entry), True

    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        run_id = check_run_id(entry.run_id)
        with self._writing(run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            self._write_file(run_dir / "effects", effect_name(entry.key), pretty(entry.to_json()))

    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        path = self._run_dir(run_id) / "effects" / effect_name(key)
        with translating("read", path):
            entry = read_entry(path)
        return entry if entry is not None and entry.run_id == run_id and entry.key == key else None

    def _entries(self, run_dir: Path) -> list[tuple[Path, LedgerEntry]]:
        effects = run_dir / "effects"
        try:
            names = sorted(os.listdir(effects))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue  # temp files of a writer
            entry = read_entry(effects / name)
            if entry is not None:
                found.append((effects / name, entry))
        return found

    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        run_dir = self._run_dir(run_id)
        with translating("read the effect ledger in", run_dir):
            rows = [entry for _, entry in self._entries(run_dir) if entry.run_id == run_id]
        return sorted(rows, key=lambda e: (e.created_at, e.key))

    def ledger_gc(self, older_than: float) -> int:
        removed = 0
        with translating("list the runs in", self._runs):
            run_ids = self._run_ids()
        for run_id in run_ids:
            with self._holding(run_id, "clean the effect ledger of", exclusive=True) as run_dir:
                if run_dir is None:
                    continue
                summary = self._summary(run_id, run_dir)
                if summary is None or summary.phase not in TERMINAL_PHASES:
                    continue  # live (or unknown) runs keep their ledger
                doomed = [path for path, entry in self._entries(run_dir) if entry.updated_at < older_than]
                for path in doomed:
                    os.unlink(path)
                if doomed:
                    fsync_dir(run_dir / "effects")
                removed += len(doomed)
        return removed
