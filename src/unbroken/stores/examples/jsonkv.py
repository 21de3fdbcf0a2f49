"""An example backend in ~200 lines of code: a directory of small JSON files, one per key.

It shows what a new backend needs and nothing more: ``JsonKVBackend``, the primitives of
``backend.py`` over a key-value place (a ``QueueBackend``: it keeps submissions too), and
``JsonKVStore``, the ``Store`` over it; every rule (leases, fencing, run-id checks, damage
detection, submit/claim) comes from ``Store``. Its ``snapshot_seq`` declares ``SnapshotIndex``.
One lock serialises the primitives, so it is for one process (``reach`` "process").
Each file is written to a temporary name, fsynced and renamed, so a write is whole or absent.
The paging reads are kept simple: ``records_between`` opens one file per seq of the range,
``snapshot_seq`` reads flags back from the newest record to the previous snapshot, and
``summaries_page`` is ``Backend``'s default (reads every head and sorts: linear in the runs).

Layout under the root::

    runs/RUN/head.json      seq, fence, owner, expires_at, the summary, and ``gen``: the
                            generation of records the head points at (the commit point)
    runs/RUN/gGEN/SEQ.json  one save record (body, checksum); a rewrite writes a new generation
                            and then moves the head to it, so it is all or nothing
    runs/RUN/ledger/KEY.json one effect-ledger entry with its checksum
    queue/RUN.json          a submission for workers
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ... import clock
from ...codec import EncodedSave, StoredRecord
from ...state import LedgerEntry, RunSummary
from .._boot_lease_clock import BootLeaseClock
from ..backend import QueueBackend, Refused, RunHead, SealedEntry, Submission, seal
from ..base import Store


class JsonKVBackend(QueueBackend):
    """Runs kept as JSON files under ``root``, for one process. A ``QueueBackend`` (it keeps
    submissions, so its store has ``claim``); ``reach`` is left at "process"."""

    durability = "power_loss"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.url = f"jsonkv://{self.root}"
        self._lock = threading.RLock()
        self._lease_clock = BootLeaseClock()

    # ------------------------------------------------------------------ files

    def _put(self, path: Path, value: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as file:
            json.dump(value, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)

    @staticmethod
    def _get(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def _run(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def _head_file(self, run_id: str) -> dict[str, Any]:
        return self._get(self._run(run_id) / "head.json") or {"seq": 0, "fence": 0, "owner": None, "expires_at": 0.0}

    def _entry_path(self, run_id: str, key: str) -> Path:
        return self._run(run_id) / "ledger" / f"{quote(key, safe='')}.json"

    # ------------------------------------------------------------------ head and clock

    def store_time(self) -> float:
        return clock.wall()

    def lease_time(self) -> float:
        return self._lease_clock.now()  # one process, one machine: the boot clock

    def read_head(self, run_id: str) -> RunHead | None:
        with self._lock:
            data = self._get(self._run(run_id) / "head.json")
            return RunHead(data["seq"], data["fence"], data["owner"], data["expires_at"]) if data else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        with self._lock:
            if self.read_head(run_id) != expected:
                return False
            fields = {"fence": new.fence, "owner": new.owner, "expires_at": new.expires_at}
            self._put(self._run(run_id) / "head.json", {**self._head_file(run_id), **fields})
            return True

    # ------------------------------------------------------------------ records

    def _checked_head(self, run_id: str, expect_seq: int, fence: int | None) -> dict[str, Any]:
        head = self._head_file(run_id)
        if head["seq"] != expect_seq or (fence is not None and head["fence"] != fence):
            raise Refused
        return head

    def _write_records(self, run_id: str, gen: int, saves: Sequence[EncodedSave]) -> None:
        for save in saves:
            record = {"body": save.body, "checksum": save.checksum, "snapshot": save.snapshot}
            self._put(self._run(run_id) / f"g{gen}" / f"{save.seq}.json", record)

    def _commit(self, run_id: str, head: dict[str, Any], last: EncodedSave, gen: int) -> None:
        row = last.summary
        summary = [row.task, row.phase, row.turns, row.tokens_used, row.updated_at]
        self._put(self._run(run_id) / "head.json", {**head, "seq": last.seq, "gen": gen, "summary": summary})

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        with self._lock:
            head = self._checked_head(save.run_id, expect_seq, fence)
            for sealed in entries:  # A2: the entries first, the record after, the head last
                self._write_entry(sealed)
            self._write_records(save.run_id, head.get("gen", 0), [save])
            self._commit(save.run_id, head, save, head.get("gen", 0))

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        with self._lock:
            head = self._checked_head(run_id, expect_seq, fence)
            old, new = head.get("gen", 0), head.get("gen", 0) + 1
            shutil.rmtree(self._run(run_id) / f"g{new}", ignore_errors=True)  # left by a crash
            for entry in (entry for save in saves for entry in save.ledger):
                self._write_entry(seal(entry))
            self._write_records(run_id, new, saves)
            self._commit(run_id, head, saves[-1], new)  # the commit point: one rename
            shutil.rmtree(self._run(run_id) / f"g{old}", ignore_errors=True)

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        with self._lock:
            head = self._head_file(run_id)
            folder = self._run(run_id) / f"g{head.get('gen', 0)}"
            seqs = sorted(int(p.stem) for p in folder.glob("*.json")) if folder.is_dir() else []
            records = []
            for seq in (s for s in seqs if after_seq < s <= head["seq"]):  # past the head: never acknowledged
                data = self._get(folder / f"{seq}.json")
                records.append(StoredRecord(seq, data["body"], data["checksum"]))
            return records

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        # Simple and bounded: one file per seq of the range (a missing one is left out, as above).
        with self._lock:
            head = self._head_file(run_id)
            folder = self._run(run_id) / f"g{head.get('gen', 0)}"
            records = []
            for seq in range(max(after_seq, 0) + 1, min(upto_seq, head["seq"]) + 1):
                data = self._get(folder / f"{seq}.json")
                if data is not None:
                    records.append(StoredRecord(seq, data["body"], data["checksum"]))
            return records

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        # Simple: the record files' snapshot flags, newest first (reads back to the previous snapshot).
        with self._lock:
            head = self._head_file(run_id)
            folder = self._run(run_id) / f"g{head.get('gen', 0)}"
            top = head["seq"] if upto_seq is None else min(upto_seq, head["seq"])
            for seq in range(top, 0, -1):
                try:
                    data = self._get(folder / f"{seq}.json")
                except ValueError:  # a damaged file is never a snapshot to start from
                    continue
                if isinstance(data, dict) and data.get("snapshot") is True:
                    return seq
            return 0

    # summaries_page: Backend's simple version (reads every head and sorts; fine for an example).

    def list_summaries(self) -> list[RunSummary]:
        with self._lock:
            runs = sorted(self.root.glob("runs/*/head.json"))
            heads = [(path.parent.name, self._get(path)) for path in runs]
            rows = [(run_id, head["summary"], head["seq"]) for run_id, head in heads if head.get("summary")]
            return [
                RunSummary(run_id, task, phase, turns, tokens, seq, updated_at)
                for run_id, (task, phase, turns, tokens, updated_at), seq in rows
                if self.records_after(run_id, 0)
            ]

    def remove_run(self, run_id: str) -> None:
        with self._lock:
            shutil.rmtree(self._run(run_id), ignore_errors=True)
            (self.root / "queue" / f"{run_id}.json").unlink(missing_ok=True)

    # ------------------------------------------------------------------ effect ledger

    def _write_entry(self, sealed: SealedEntry) -> None:
        value = {"entry": sealed.entry.to_json(), "checksum": sealed.checksum}
        self._put(self._entry_path(sealed.entry.run_id, sealed.entry.key), value)

    def _fenced(self, run_id: str, fence: int | None) -> None:
        if fence is not None and self._head_file(run_id)["fence"] != fence:
            raise Refused

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        with self._lock:
            self._fenced(sealed.entry.run_id, fence)
            existing = self.get_entry(sealed.entry.run_id, sealed.entry.key)
            if existing is None:
                self._write_entry(sealed)
            return existing

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        with self._lock:
            self._fenced(sealed.entry.run_id, fence)
            self._write_entry(sealed)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        data = self._get(self._entry_path(run_id, key))
        return SealedEntry(LedgerEntry.from_json(data["entry"]), data["checksum"]) if data else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        with self._lock:
            paths = sorted((self._run(run_id) / "ledger").glob("*.json"))
            return [SealedEntry(LedgerEntry.from_json(d["entry"]), d["checksum"]) for d in map(self._get, paths)]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._entry_path(run_id, key).unlink(missing_ok=True)

    # ------------------------------------------------------------------ submissions

    def add_submission(self, submission: Submission) -> Submission | None:
        with self._lock:
            path = self.root / "queue" / f"{submission.run_id}.json"
            existing = self._get(path)
            if existing is None:
                self._put(path, [submission.task, submission.agent, submission.submitted_at])
                return None
            return Submission(submission.run_id, *existing)

    def list_submissions(self) -> list[Submission]:
        with self._lock:
            queued = [Submission(p.stem, *self._get(p)) for p in (self.root / "queue").glob("*.json")]
            return sorted(queued, key=lambda s: (s.submitted_at, s.run_id))


class JsonKVStore(Store):
    """The store users open: ``Store``'s rules over a ``JsonKVBackend`` (all a new store needs)."""

    backend: JsonKVBackend

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(JsonKVBackend(root))
