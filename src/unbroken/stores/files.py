"""``file:///DIR``: runs as directories of human-readable JSON, for one machine.

Layout::

    DIR/unbroken-store.json                      {"store": "unbroken-files", "store_schema": 1}
    DIR/runs/<run_id>/.lock                      flock'ed by whoever touches the run
    DIR/runs/<run_id>/records/<seq:012d>.json    one file per save point, never rewritten
    DIR/runs/<run_id>/effects/<key>.json         one effect-ledger entry per idempotency key
    DIR/runs/<run_id>/lease.json                 owner, fence, expires_at (lease.prev.json: the generation before)
    DIR/trash/                                   runs being deleted

A record file holds two lines: a small JSON header (seq, checksum, label, snapshot, bytes, and
the run summary that ``list_runs`` shows, so a save writes one file, not a summary file too)
and the record body exactly as the codec made it. A record file that is torn, unparsable,
oversized or missing comes back as a record whose checksum fails, so the codec reports damage
at that seq and ``load(recover=True)`` stops just before it.

Every file is written the same way: a temp file in the same directory, flush + fsync, rename
onto its final name, fsync the directory. A save that returned survives power loss; a crash
at any moment leaves either the old file or the new one, never a mix.

Several processes on one machine may share DIR: a run's writers serialize on an exclusive
``flock`` of its ``.lock`` and readers take a shared one. POSIX only; ``flock`` is not
reliable on network file systems: use PostgreSQL for many machines.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import crashpoints
from ..codec import MAX_RECORD_BYTES, EncodedSave, StoredRecord, dumps
from ..errors import (
    ConcurrentSave,
    CorruptCheckpoint,
    IncompatibleSchema,
    InvalidRunId,
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    StoreUnavailable,
)
from ..state import TERMINAL_PHASES, Lease, LedgerEntry, RunSummary, check_run_id
from .base import Store

STORE_SCHEMA = 1
MARKER = "unbroken-store.json"
UNREADABLE = "unreadable"
"""The checksum given to a record file that cannot be parsed, so the codec reports it as damaged."""

_RECORD_FILE = re.compile(r"^(\d{12})\.json$")
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_HEADER_CAP = 1024 * 1024  # the header line (mostly the run's task) on top of the body cap
_HEADER_TASK_CHARS = 64 * 1024
_LOCK_ATTEMPTS = 100


def _record_name(seq: int) -> str:
    return f"{seq:012d}.json"


def _effect_name(key: str) -> str:
    # Idempotency keys are safe file names; anything else is hashed (``~`` cannot start a safe key).
    if _SAFE_KEY.match(key):
        return f"{key}.json"
    return f"~{hashlib.sha256(key.encode()).hexdigest()}.json"


def _pretty(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _unavailable(exc: OSError, path: object, doing: str) -> StoreUnavailable:
    """Translate an OSError into a StoreUnavailable that names the path and what to do."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        why = "no space left on the device (or over quota); free some space, then retry"
    elif code in (errno.EACCES, errno.EPERM):
        why = "permission denied; make the directory writable by this user or pick another store directory"
    elif code == errno.EROFS:
        why = "the file system is read-only; pick a writable store directory"
    elif code == errno.ENOTDIR:
        why = "part of the path is a regular file, not a directory; pick a directory path"
    elif code == errno.EIO:
        why = "the disk reported an I/O error; check the device (dmesg) before retrying"
    else:
        why = f"{exc.strerror or exc}; check the directory and retry"
    return StoreUnavailable(f"file store: cannot {doing} {path}: {why}. The run stays at its last completed save point")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class FileStore(Store):
    """A run store in a directory: one JSON file per save point."""

    capabilities = frozenset({"leases", "ledger", "multi_process"})

    def __init__(self, path: str | os.PathLike[str], *, url: str | None = None) -> None:
        self.root = Path(path).absolute()
        self.url = url or f"file://{self.root}"
        self._runs = self.root / "runs"
        self._trash = self.root / "trash"
        try:
            self._open()
        except OSError as exc:
            raise _unavailable(exc, getattr(exc, "filename", None) or self.root, "open the file store at") from exc

    # ------------------------------------------------------------------ plumbing

    def _open(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StoreUnavailable(f"file store: {self.root} is a file, not a directory; pick a directory path")
        self._make_dirs(self.root)
        self._make_dirs(self._runs)
        self._make_dirs(self._trash)
        marker = self.root / MARKER
        try:
            found = json.loads(marker.read_bytes())
        except FileNotFoundError:
            self._write_file(self.root, MARKER, _pretty({"store": "unbroken-files", "store_schema": STORE_SCHEMA}))
        except ValueError as exc:
            raise StoreUnavailable(f"file store: {marker} is not valid JSON ({exc}); is {self.root} a store?") from exc
        else:
            version = found.get("store_schema") if isinstance(found, dict) else None
            if type(version) is not int:
                raise StoreUnavailable(f"file store: {marker} has no store_schema; is {self.root} an unbroken store?")
            if version > STORE_SCHEMA:
                raise IncompatibleSchema(
                    f"{self.root} uses file store schema {version}; this unbroken knows {STORE_SCHEMA}. "
                    "Upgrade unbroken."
                )
        # Permissions do not stop the root user, so probe with a real file rather than os.access.
        probe = self._runs / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
        self._sweep_trash()

    def _sweep_trash(self) -> None:
        """Remove what crashed operations left: runs renamed into the trash by a delete_run, and
        run directories staged by a writer that died before renaming them in (after an hour, so
        a live writer's staging is never touched)."""
        try:
            for name in os.listdir(self._trash):
                _remove_tree(self._trash / name)
            stale = time.time() - 3600
            for name in os.listdir(self._runs):
                staged = self._runs / name
                if name.startswith(".new-") and staged.stat().st_mtime < stale:
                    _remove_tree(staged)
        except OSError:
            pass  # best effort: leftovers are hidden and harmless

    @staticmethod
    def _make_dirs(path: Path) -> None:
        """Create ``path`` and missing parents, fsyncing each parent so the new entries survive."""
        missing: list[Path] = []
        current = path
        while not current.is_dir():
            missing.append(current)
            if current.parent == current:
                break
            current = current.parent
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                if not directory.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "a regular file is in the way", str(directory)) from None
            _fsync_dir(directory.parent)

    @contextmanager
    def _translate(self, doing: str, path: object) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise _unavailable(exc, getattr(exc, "filename", None) or path, doing) from exc

    def _write_file(
        self, directory: Path, name: str, data: bytes, *, sync_dir: bool = True, undo: bool = False
    ) -> None:
        """Durably create or replace ``directory/name``: temp file, fsync, rename, fsync directory.

        On failure no temp file remains; with ``undo`` the final file is removed again if the
        directory could not be synced (so a failed save leaves the run as it was)."""
        final = directory / name
        temp = directory / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        renamed = False
        try:
            with open(temp, "xb") as handle:
                handle.write(data)
                handle.flush()
                crashpoints.hit("file.after_temp_write")
                os.fsync(handle.fileno())
            crashpoints.hit("file.before_rename")
            os.rename(temp, final)
            renamed = True
            crashpoints.hit("file.after_rename")
            if sync_dir:
                _fsync_dir(directory)
        except OSError as exc:
            if renamed and undo:
                try:
                    os.unlink(final)
                    _fsync_dir(directory)
                except OSError:
                    pass
            raise _unavailable(exc, final, "write") from exc
        finally:
            if not renamed:
                with suppress(OSError):
                    os.unlink(temp)

    def _run_dir(self, run_id: str) -> Path:
        return self._runs / check_run_id(run_id)

    def _create_run_dir(self, run_id: str) -> None:
        """Create the run's directory complete (records/, effects/, .lock) or not at all."""
        staged = self._runs / f".new-{secrets.token_hex(8)}-{run_id}"
        try:
            os.mkdir(staged)
            os.mkdir(staged / "records")
            os.mkdir(staged / "effects")
            os.close(os.open(staged / ".lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            _fsync_dir(staged)
            try:
                os.rename(staged, self._runs / run_id)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                return  # another writer created it first
            _fsync_dir(self._runs)
        finally:
            if staged.exists():
                _remove_tree(staged)

    def _lock(self, run_id: str, *, exclusive: bool, create: bool) -> int | None:
        """Open and flock the run's lock file; None when the run does not exist (and not ``create``).
        Closing the returned descriptor releases the lock."""
        run_dir = self._run_dir(run_id)
        lock_path = run_dir / ".lock"
        for _ in range(_LOCK_ATTEMPTS):
            try:
                fd = os.open(lock_path, os.O_RDONLY)  # flock needs no write access
            except FileNotFoundError:
                if not create:
                    return None
                if run_dir.is_dir():
                    # Made by hand: complete it in place (a missing records/ is left to _settle,
                    # which knows about records.new and records.old).
                    self._make_dirs(run_dir / "effects")
                    os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o644))
                    _fsync_dir(run_dir)
                else:
                    self._create_run_dir(run_id)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                # delete_run moves the run directory away while holding the lock: make sure the
                # file we locked is still the run's lock file, else start again.
                mine = os.fstat(fd)
                try:
                    now = os.stat(lock_path)
                    same = (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev)
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                return fd
            os.close(fd)
        raise StoreUnavailable(f"file store: could not lock {lock_path}: the run keeps being deleted and recreated")

    @contextmanager
    def _writing(self, run_id: str, doing: str) -> Iterator[Path]:
        """Hold the run's exclusive lock, creating the run directory if needed."""
        run_dir = self._run_dir(run_id)
        with self._translate(doing, run_dir):
            fd = self._lock(run_id, exclusive=True, create=True)
            assert fd is not None
            try:
                yield run_dir
            finally:
                os.close(fd)

    @contextmanager
    def _holding(self, run_id: str, doing: str, *, exclusive: bool) -> Iterator[Path | None]:
        """Hold the run's lock with its records directory in place; None if the run does not exist."""
        run_dir = self._run_dir(run_id)
        with self._translate(doing, run_dir):
            fd = self._lock(run_id, exclusive=exclusive, create=False)
            try:
                if fd is not None and not (run_dir / "records").is_dir():
                    # A rewrite crashed between its two renames: settle it under the exclusive lock.
                    if not exclusive:
                        os.close(fd)
                        fd = None
                        fd = self._lock(run_id, exclusive=True, create=False)
                    if fd is not None:
                        self._settle(run_dir)
                yield run_dir if fd is not None else None
            finally:
                if fd is not None:
                    os.close(fd)

    def _run_ids(self) -> list[str]:
        ids = []
        for name in sorted(os.listdir(self._runs)):
            try:
                ids.append(check_run_id(name))
            except InvalidRunId:
                continue  # staging directories and stray files
        return ids

    # ------------------------------------------------------------------ records

    def _settle(self, run_dir: Path) -> None:
        """Finish or undo a rewrite that was interrupted; the caller holds the exclusive lock.

        rewrite() builds records.new completely (fsynced) before it renames records to
        records.old and records.new to records, so: records present means any records.new is
        an unfinished build (dropped) and any records.old is left-over garbage; records missing
        means the crash fell between the renames, so records.new is complete and is put in."""
        records, new, old = run_dir / "records", run_dir / "records.new", run_dir / "records.old"
        if not records.is_dir():
            if new.is_dir():
                os.rename(new, records)
            elif old.is_dir():
                os.rename(old, records)
            else:
                os.mkdir(records)
            _fsync_dir(run_dir)
        for leftover in (new, old):
            if leftover.exists():
                _remove_tree(leftover)

    @staticmethod
    def _seqs(records: Path) -> list[int]:
        seqs = []
        for name in os.listdir(records):
            match = _RECORD_FILE.match(name)
            if match:
                seqs.append(int(match.group(1)))
        seqs.sort()
        return seqs

    def _head(self, run_dir: Path) -> int:
        seqs = self._seqs(run_dir / "records")
        return seqs[-1] if seqs else 0

    def _check_fence(self, run_dir: Path, run_id: str, fence: int | None) -> None:
        if fence is None:
            return
        current = self._lease_state(run_dir)[1]
        if current != fence:
            raise LeaseLost(f"run {run_id!r} is now owned under fence {current}, not {fence}; this write was refused")

    def _check_head(self, run_dir: Path, run_id: str, expect_seq: int) -> None:
        """Compare-and-set on the head without listing the directory on the common path: the
        head is ``expect_seq`` iff its record exists and the next one does not (records are
        contiguous)."""
        records = run_dir / "records"
        if not records.is_dir():
            self._settle(run_dir)
        if expect_seq == 0:
            ok = not self._seqs(records)
        else:
            ok = (records / _record_name(expect_seq)).exists() and not (records / _record_name(expect_seq + 1)).exists()
        if not ok:
            head = self._head(run_dir)
            raise ConcurrentSave(f"run {run_id!r} is at save {head}, not {expect_seq}; reload it")

    @staticmethod
    def _record_bytes(save: EncodedSave) -> bytes:
        body = save.body.encode()
        summary: dict[str, Any] = {
            "task": save.summary.task,
            "phase": save.summary.phase,
            "turns": save.summary.turns,
            "tokens_used": save.summary.tokens_used,
            "save_seq": save.summary.save_seq,
            "updated_at": save.summary.updated_at,
        }
        if len(save.summary.task) > _HEADER_TASK_CHARS:
            summary["task"] = save.summary.task[:_HEADER_TASK_CHARS]  # list_runs only; the body has it all
        header = {
            "seq": save.seq,
            "checksum": save.checksum,
            "label": save.label,
            "snapshot": save.snapshot,
            "bytes": len(body),
            "summary": summary,
        }
        return dumps(header).encode() + b"\n" + body + b"\n"

    def _write_ledger(self, run_dir: Path, run_id: str, entries: Sequence[LedgerEntry]) -> None:
        if not entries:
            return
        effects = run_dir / "effects"
        for entry in entries:
            if entry.run_id != run_id:
                raise ValueError(f"ledger entry {entry.key!r} belongs to run {entry.run_id!r}, not {run_id!r}")
            self._write_file(effects, _effect_name(entry.key), _pretty(entry.to_json()), sync_dir=False)
        with self._translate("sync", effects):
            _fsync_dir(effects)

    def append(self, save: EncodedSave, *, expect_seq: int, fence: int | None = None) -> None:
        run_id = check_run_id(save.run_id)
        if save.seq != expect_seq + 1:
            raise ValueError(f"save {save.seq} cannot follow save {expect_seq}; a save's seq is its predecessor's + 1")
        with self._writing(run_id, "save to") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            self._check_head(run_dir, run_id, expect_seq)
            # The ledger entries go first, the record second. A crash in between leaves outcomes
            # recorded without their save record: resume then sees those calls still dangling,
            # finds their results in the ledger and reuses them instead of running the tools
            # again. The other order could leave a save point whose ledger entries never landed.
            self._write_ledger(run_dir, run_id, save.ledger)
            self._write_file(run_dir / "records", _record_name(save.seq), self._record_bytes(save), undo=True)

    def _read_record(self, path: Path, seq: int) -> StoredRecord:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_RECORD_BYTES + _HEADER_CAP:
                return StoredRecord(seq, "", f"{UNREADABLE}: file is {size} bytes, over the cap")
            data = handle.read()
        head, _, rest = data.partition(b"\n")
        try:
            header = json.loads(head)
        except (ValueError, RecursionError):
            return StoredRecord(seq, "", UNREADABLE)
        if not isinstance(header, dict) or header.get("seq") != seq or not isinstance(header.get("checksum"), str):
            return StoredRecord(seq, "", UNREADABLE)
        if rest.endswith(b"\n"):
            rest = rest[:-1]
        # A torn body decodes to text whose checksum fails: the codec reports it at this seq.
        return StoredRecord(seq, rest.decode("utf-8", errors="replace"), header["checksum"])

    def _read_all(self, run_dir: Path) -> list[StoredRecord]:
        records = run_dir / "records"
        result: list[StoredRecord] = []
        for seq in self._seqs(records):
            if result and seq != result[-1].seq + 1:
                # A missing file in the middle is reported as a damaged record, never skipped.
                result.append(StoredRecord(result[-1].seq + 1, "", f"{UNREADABLE}: record file is missing"))
            try:
                result.append(self._read_record(records / _record_name(seq), seq))
            except FileNotFoundError:
                result.append(StoredRecord(seq, "", f"{UNREADABLE}: record file vanished"))
        return result

    def read_records(self, run_id: str) -> list[StoredRecord]:
        with self._holding(run_id, "read", exclusive=False) as run_dir:
            records = self._read_all(run_dir) if run_dir is not None else []
        if not records:
            raise RunNotFound(f"no run {run_id!r} in {self.url}")
        return records

    def rewrite(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None = None) -> None:
        check_run_id(run_id)
        if not saves:
            raise ValueError("rewrite needs at least one save record")
        for before, after in itertools.pairwise(saves):
            if after.seq != before.seq + 1:
                raise ValueError("rewrite needs save records with consecutive seqs")
        if any(save.run_id != run_id for save in saves):
            raise ValueError(f"every save record given to rewrite must belong to run {run_id!r}")
        with self._writing(run_id, "rewrite") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            self._settle(run_dir)
            head = self._head(run_dir)
            if head != expect_seq:
                raise ConcurrentSave(f"run {run_id!r} is at save {head}, not {expect_seq}; reload it")
            # Ledger first, as in append.
            self._write_ledger(run_dir, run_id, [entry for save in saves for entry in save.ledger])
            self._swap_records(run_dir, saves)

    def _swap_records(self, run_dir: Path, saves: Sequence[EncodedSave]) -> None:
        records, new, old = run_dir / "records", run_dir / "records.new", run_dir / "records.old"
        swapped = False
        try:
            os.mkdir(new)
            for save in saves:
                with open(new / _record_name(save.seq), "xb") as handle:
                    handle.write(self._record_bytes(save))
                    handle.flush()
                    os.fsync(handle.fileno())
            _fsync_dir(new)
            _fsync_dir(run_dir)
            crashpoints.hit("file.before_rename")
            os.rename(records, old)
            crashpoints.hit("file.rewrite_between_renames")
            os.rename(new, records)
            swapped = True
            crashpoints.hit("file.after_rename")
            _fsync_dir(run_dir)
        except OSError as exc:
            if swapped:
                # The swap is visible but not durable: undo it, so a failed rewrite changes nothing.
                with suppress(OSError):
                    os.rename(records, new)
                    os.rename(old, records)
                    swapped = False
                    _fsync_dir(run_dir)
            raise _unavailable(exc, getattr(exc, "filename", None) or new, "rewrite the records in") from exc
        finally:
            if not swapped:
                # The rewrite did not happen: put the old records back, drop the new ones.
                if not records.exists() and old.is_dir():
                    with suppress(OSError):
                        os.rename(old, records)
                _remove_tree(new)
        _remove_tree(old)

    def _summary(self, run_id: str, run_dir: Path) -> RunSummary | None:
        """The run's summary from the header of its last readable record; None if it has none."""
        records = run_dir / "records"
        for seq in reversed(self._seqs(records)):
            try:
                with open(records / _record_name(seq), "rb") as handle:
                    header = json.loads(handle.readline(_HEADER_CAP))
                fields = header["summary"]
                return RunSummary(
                    run_id=run_id,
                    task=str(fields["task"]),
                    phase=str(fields["phase"]),
                    turns=int(fields["turns"]),
                    tokens_used=int(fields["tokens_used"]),
                    save_seq=int(fields["save_seq"]),
                    updated_at=float(fields["updated_at"]),
                )
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, RecursionError):
                continue  # a damaged header: the record before it still describes the run
        return None

    def list_runs(self) -> list[RunSummary]:
        rows = []
        with self._translate("list the runs in", self._runs):
            run_ids = self._run_ids()
        for run_id in run_ids:
            with self._holding(run_id, "read", exclusive=False) as run_dir:
                summary = self._summary(run_id, run_dir) if run_dir is not None else None
            if summary is not None:
                rows.append(summary)
        return sorted(rows, key=lambda row: row.updated_at, reverse=True)

    def delete_run(self, run_id: str) -> None:
        check_run_id(run_id)
        trash = self._trash / f"{run_id}.{secrets.token_hex(8)}"
        with self._holding(run_id, "delete", exclusive=True) as run_dir:
            if run_dir is None:
                return
            # One rename makes the whole run disappear at once; waiting lockers notice and retry.
            os.rename(run_dir, trash)
            _fsync_dir(self._runs)
        _remove_tree(trash)

    # ------------------------------------------------------------------ ledger

    def _read_entry(self, path: Path) -> LedgerEntry | None:
        try:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > MAX_RECORD_BYTES:
                    raise CorruptCheckpoint(f"effect ledger entry {path} is larger than {MAX_RECORD_BYTES} bytes")
                data = handle.read()
        except FileNotFoundError:
            return None
        try:
            return LedgerEntry.from_json(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise CorruptCheckpoint(
                f"effect ledger entry {path} is damaged ({type(exc).__name__}: {exc}); restore it or remove it"
            ) from exc

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        run_id = check_run_id(entry.run_id)
        with self._writing(run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            existing = self._read_entry(run_dir / "effects" / _effect_name(entry.key))
            if existing is not None:
                return existing, False
            self._write_file(run_dir / "effects", _effect_name(entry.key), _pretty(entry.to_json()))
        return replace(entry), True

    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        run_id = check_run_id(entry.run_id)
        with self._writing(run_id, "write the effect ledger of") as run_dir:
            self._check_fence(run_dir, run_id, fence)
            self._write_file(run_dir / "effects", _effect_name(entry.key), _pretty(entry.to_json()))

    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        path = self._run_dir(run_id) / "effects" / _effect_name(key)
        with self._translate("read", path):
            entry = self._read_entry(path)
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
            entry = self._read_entry(effects / name)
            if entry is not None:
                found.append((effects / name, entry))
        return found

    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        run_dir = self._run_dir(run_id)
        with self._translate("read the effect ledger in", run_dir):
            rows = [entry for _, entry in self._entries(run_dir) if entry.run_id == run_id]
        return sorted(rows, key=lambda e: (e.created_at, e.key))

    def ledger_gc(self, older_than: float) -> int:
        removed = 0
        with self._translate("list the runs in", self._runs):
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
                    _fsync_dir(run_dir / "effects")
                removed += len(doomed)
        return removed

    # ------------------------------------------------------------------ leases

    def _read_json(self, path: Path) -> dict[str, Any] | None:
        """The JSON object in ``path``; None if missing; raises ValueError if damaged."""
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except RecursionError as exc:  # hostile nesting: damaged, like any other bad JSON
            raise ValueError(f"{path} is nested too deeply") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        return data

    def _lease_state(self, run_dir: Path) -> tuple[str | None, int, float]:
        """(owner, fence, expires_at) of the run; (None, 0, 0.0) when it never had a lease.

        lease.json is replaced by rename, so it is never torn by a crash; if it is damaged
        anyway, its fence is rebuilt from lease.prev.json (it is always one more), so the fence
        never goes back."""
        try:
            lease = self._read_json(run_dir / "lease.json")
            if lease is None:
                return None, 0, 0.0
            owner = lease.get("owner")
            return (str(owner) if owner is not None else None), int(lease["fence"]), float(lease["expires_at"])
        except (ValueError, KeyError, TypeError):
            pass
        try:
            prev = self._read_json(run_dir / "lease.prev.json")
            prev_fence = int(prev["fence"]) if prev is not None else 0
        except (ValueError, KeyError, TypeError):
            prev_fence = 0
        return None, prev_fence + 1, 0.0

    def _write_lease(self, run_dir: Path, owner: str | None, fence: int, expires_at: float) -> None:
        data = _pretty({"owner": owner, "fence": fence, "expires_at": expires_at})
        self._write_file(run_dir, "lease.json", data)

    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        with self._writing(run_id, "take the lease of") as run_dir:
            now = time.time()  # one machine, one clock
            holder, fence, expires = self._lease_state(run_dir)
            if holder is not None and expires > now and holder not in (owner, takeover_from):
                raise LeaseHeld(f"run {run_id!r} is held by {holder} for {expires - now:.1f}s more")
            if fence:
                previous = _pretty({"owner": holder, "fence": fence, "expires_at": expires})
                self._write_file(run_dir, "lease.prev.json", previous, sync_dir=False)
            self._write_lease(run_dir, owner, fence + 1, now + ttl)
        return Lease(run_id, owner, fence + 1, now + ttl)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        with self._holding(lease.run_id, "renew the lease of", exclusive=True) as run_dir:
            holder, fence, _ = self._lease_state(run_dir) if run_dir is not None else (None, 0, 0.0)
            if run_dir is None or fence != lease.fence or holder != lease.owner:
                raise LeaseLost(f"lease on run {lease.run_id!r} (fence {lease.fence}) was taken over")
            expires = time.time() + ttl
            self._write_lease(run_dir, lease.owner, lease.fence, expires)
        return replace(lease, expires_at=expires)

    def release_lease(self, lease: Lease) -> None:
        with self._holding(lease.run_id, "release the lease of", exclusive=True) as run_dir:
            if run_dir is None:
                return
            holder, fence, _ = self._lease_state(run_dir)
            if fence == lease.fence and holder is not None:
                self._write_lease(run_dir, None, fence, 0.0)

    def lease_of(self, run_id: str) -> Lease | None:
        run_dir = self._run_dir(run_id)
        with self._translate("read the lease of", run_dir):
            holder, fence, expires = self._lease_state(run_dir)
        if holder is None or expires <= time.time():
            return None
        return Lease(run_id, holder, fence, expires)
