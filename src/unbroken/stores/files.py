"""``file:///DIR``: runs as directories of human-readable JSON, for one machine.

Layout::

    DIR/unbroken-store.json                      {"store": "unbroken-files", "store_schema": 1}
    DIR/runs/<run_id>/.lock                      flock'ed by whoever touches the run
    DIR/runs/<run_id>/records/<seq:012d>.json    one file per recent save point, never rewritten
    DIR/runs/<run_id>/records/segment-<first>-<last>.json   older save points packed together
    DIR/runs/<run_id>/effects/<key>.json         one effect-ledger entry per idempotency key
    DIR/runs/<run_id>/lease.json                 owner, fence, expires_at (lease.prev.json: the generation before)
    DIR/trash/                                   runs being deleted
    DIR/lease-clock/<boot id>                    the boot's number on the lease clock (``_boot_lease_clock``)

A record file holds two lines: a small JSON header (seq, checksum, label, snapshot, bytes, and
the run summary that ``list_runs`` shows, so a save writes one file, not a summary file too)
and the record body exactly as the codec made it. A record file that is torn, unparsable,
oversized or missing comes back as a record whose checksum fails, so the codec reports damage
at that seq and ``load(recover=True)`` stops just before it.

Older records are packed into segment files so that a resume reads a few files, not one per
save: every ``KEEP_RECENT`` saves, once more than ``KEEP_RECENT + PACK_BATCH`` records are loose,
the oldest ``PACK_BATCH`` (at most ``SEGMENT_BYTES``) are copied into one segment file (written
like any other file: durable before it is named) and only then their record files are deleted.
A crash between the two leaves records both loose and packed: readers take the segment and the
next pack deletes the leftovers. The ``KEEP_RECENT`` most recent saves stay one file each.

Every file is written the same way: a temp file in the same directory, flush + fsync, rename
onto its final name, fsync the directory. A save that returned survives power loss; a crash
at any moment leaves either the old file or the new one, never a mix.

Several processes on one machine may share DIR: a run's writers serialize on an exclusive
``flock`` of its ``.lock`` and readers take a shared one. POSIX only; ``flock`` is not
reliable on network file systems: use PostgreSQL for many machines.

This module holds the store itself: opening, locking, the durable write paths and the records.
The ledger and lease methods are in ``_file_ledger.py`` and ``_file_leases.py``, file names and
formats in ``_file_format.py``, fsync and mkdir primitives in ``_durable.py``. Every function
that writes (and fsyncs) a save's files stays here: the power-loss check
(``tests/faults_kit``) names fsync call sites by their function in this file.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from .. import clock, crashpoints
from ..codec import EncodedSave
from ..errors import IncompatibleSchema, InvalidRunId, StoreUnavailable
from ..state import RunSummary, check_run_id
from ._boot_lease_clock import BootLeaseClock
from ._durable import (
    PRIVATE_FILE_MODE,
    create_file,
    directory_mode,
    fsync_dir,
    make_dirs,
    opener,
    remove_tree,
    translating,
    unavailable,
)
from ._file_format import (
    HEADER_CAP,
    MARKER,
    STORE_SCHEMA,
    UNREADABLE,
    RawRecord,
    effect_name,
    entry_bytes,
    head_markers,
    head_name,
    parse_summary,
    pretty,
    record_bytes,
    record_name,
    record_parts,
    record_seqs,
    segment_bytes,
    segment_name,
    segment_spans,
)
from ._file_leases import LeaseFiles
from ._file_ledger import LedgerFiles
from ._file_reads import RecordReads
from .backend import Backend, Reach, Refused, SealedEntry, seal
from .base import Store

_LOCK_ATTEMPTS = 100
KEEP_RECENT = 32
"""The most recent save points always kept one human-readable file each."""
PACK_BATCH = 256
"""Records packed into one segment file (fewer if they pass ``SEGMENT_BYTES``)."""
SEGMENT_BYTES = 16 * 1024 * 1024


class FileBackend(RecordReads, LedgerFiles, LeaseFiles, Backend):
    """The primitives of a run store in a directory: one JSON file per save point."""

    reach: Reach = "machine"

    def __init__(self, path: str | os.PathLike[str], *, url: str | None = None, mode: int = PRIVATE_FILE_MODE) -> None:
        """``mode``: the permissions of every file the store creates (directories get the
        matching execute bits); owner-only by default."""
        self.file_mode, self.dir_mode, self._opener = mode, directory_mode(mode), opener(mode)
        self.root = Path(path).absolute()
        self.url = url or f"file://{self.root}"
        self._runs = self.root / "runs"
        self._trash = self.root / "trash"
        self._lease_clock = BootLeaseClock(self._number_boot)
        try:
            self._open()
        except OSError as exc:
            raise unavailable(exc, getattr(exc, "filename", None) or self.root, "open the file store at") from exc

    # ------------------------------------------------------------------ plumbing

    def _open(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StoreUnavailable(f"file store: {self.root} is a file, not a directory; pick a directory path")
        make_dirs(self.root, self.dir_mode)
        make_dirs(self._runs, self.dir_mode)
        make_dirs(self._trash, self.dir_mode)
        marker = self.root / MARKER
        try:
            found = json.loads(marker.read_bytes())
        except FileNotFoundError:
            self._write_file(self.root, MARKER, pretty({"store": "unbroken-files", "store_schema": STORE_SCHEMA}))
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
                remove_tree(self._trash / name)
            stale = clock.wall() - 3600
            for name in os.listdir(self._runs):
                staged = self._runs / name
                if name.startswith(".new-") and staged.stat().st_mtime < stale:
                    remove_tree(staged)
        except OSError:
            pass  # best effort: leftovers are hidden and harmless

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
            with open(temp, "xb", opener=self._opener) as handle:
                handle.write(data)
                handle.flush()
                crashpoints.hit("file.after_temp_write")
                os.fsync(handle.fileno())
            crashpoints.hit("file.before_rename")
            os.rename(temp, final)
            renamed = True
            crashpoints.hit("file.after_rename")
            if sync_dir:
                fsync_dir(directory)
        except OSError as exc:
            if renamed and undo:
                try:
                    os.unlink(final)
                    fsync_dir(directory)
                except OSError:
                    pass
            raise unavailable(exc, final, "write") from exc
        finally:
            if not renamed:
                with suppress(OSError):
                    os.unlink(temp)

    def _run_dir(self, run_id: str) -> Path:
        return self._runs / run_id  # checked at the Store's door

    def _create_run_dir(self, run_id: str) -> None:
        """Create the run's directory complete (records/, effects/, .lock) or not at all."""
        staged = self._runs / f".new-{secrets.token_hex(8)}-{run_id}"
        try:
            os.mkdir(staged, self.dir_mode)
            os.mkdir(staged / "records", self.dir_mode)
            os.mkdir(staged / "effects", self.dir_mode)
            os.close(create_file(staged / ".lock", self.file_mode))
            fsync_dir(staged)
            try:
                os.rename(staged, self._runs / run_id)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                return  # another writer created it first
            fsync_dir(self._runs)
        finally:
            if staged.exists():
                remove_tree(staged)

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
                    make_dirs(run_dir / "effects", self.dir_mode)
                    os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT, self.file_mode))
                    fsync_dir(run_dir)
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
        with translating(doing, run_dir):
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
        with translating(doing, run_dir):
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
                os.mkdir(records, self.dir_mode)
            fsync_dir(run_dir)
        for leftover in (new, old):
            if leftover.exists():
                remove_tree(leftover)

    def _head(self, run_dir: Path) -> int:
        """The run's head seq: its head marker, or its newest record if that is newer (a crash
        between the record's rename and the marker's) or if there is no marker (older stores)."""
        records = run_dir / "records"
        packed = [last for _, last in segment_spans(records)[-1:]]
        return max(record_seqs(records)[-1:] + head_markers(records) + packed, default=0)

    def _check_head(self, run_dir: Path, expect_seq: int) -> str | None:
        """Compare-and-set on the head without listing the directory on the common path (the
        marker names ``expect_seq`` and the next record does not exist). Returns the marker
        to move forward (None: there is none yet); ``Refused`` if the head is elsewhere."""
        records = run_dir / "records"
        if not records.is_dir():
            self._settle(run_dir)
        marker = head_name(expect_seq)
        if (records / marker).exists() and not (records / record_name(expect_seq + 1)).exists():
            return marker
        if self._head(run_dir) != expect_seq:
            raise Refused
        markers = head_markers(records)
        return head_name(markers[-1]) if markers else None

    def _move_head(self, records: Path, marker: str | None, seq: int) -> None:
        """Point the head marker at ``seq`` and make the directory durable (the new record too)."""
        if marker is None:
            os.close(os.open(records / head_name(seq), os.O_WRONLY | os.O_CREAT, self.file_mode))
        else:
            os.rename(records / marker, records / head_name(seq))
        fsync_dir(records)

    @staticmethod
    def _undo_save(records: Path, marker: str | None, seq: int) -> None:
        """Take a save that could not be made durable back: record gone, marker where it was."""
        with suppress(OSError):
            os.unlink(records / record_name(seq))
        with suppress(OSError):
            if marker is None:
                os.unlink(records / head_name(seq))
            else:
                os.rename(records / head_name(seq), records / marker)
        with suppress(OSError):
            fsync_dir(records)

    def _write_ledger(self, run_dir: Path, entries: Sequence[SealedEntry]) -> None:
        if not entries:
            return
        effects = run_dir / "effects"
        for sealed in entries:
            self._write_file(effects, effect_name(sealed.entry.key), entry_bytes(sealed), sync_dir=False)
        with translating("sync", effects):
            fsync_dir(effects)

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        with self._writing(save.run_id, "save to") as run_dir:
            self._check_fence(run_dir, fence)
            marker = self._check_head(run_dir, expect_seq)
            # The ledger entries go first, the record second (rule A2). A crash in between leaves
            # outcomes recorded without their save record: resume then sees those calls still
            # dangling, finds their results in the ledger and reuses them instead of running the
            # tools again. The other order could leave a save point whose entries never landed.
            self._write_ledger(run_dir, entries)
            records = run_dir / "records"
            self._write_file(records, record_name(save.seq), record_bytes(save), sync_dir=False)
            try:
                self._move_head(records, marker, save.seq)
            except OSError as exc:
                self._undo_save(records, marker, save.seq)
                raise unavailable(exc, records, "save to") from exc
            if save.seq % KEEP_RECENT == 0:
                with suppress(OSError):  # the save is durable already; packing is retried later
                    self._pack(records)

    def _pack(self, records: Path) -> None:
        """Pack the oldest loose records into a segment file when enough are loose (see the
        module docstring); the caller holds the run's exclusive lock. Crash-safe at every step."""
        spans = segment_spans(records)
        packed_upto = spans[-1][1] if spans else 0
        loose = record_seqs(records)
        leftovers = [records / record_name(seq) for seq in loose if seq <= packed_upto]  # a pack cut short
        # A segment's temp file can only be a dead packer's: packing holds the exclusive lock.
        leftovers += [records / name for name in os.listdir(records) if name.startswith(".segment-")]
        for path in leftovers:
            os.unlink(path)
        if leftovers:
            fsync_dir(records)
        loose = [seq for seq in loose if seq > packed_upto]
        if len(loose) < KEEP_RECENT + PACK_BATCH:
            return
        batch: list[RawRecord] = []
        size = 0
        for expected, seq in zip(itertools.count(loose[0]), loose[: len(loose) - KEEP_RECENT], strict=False):
            if seq != expected or len(batch) == PACK_BATCH or (batch and size > SEGMENT_BYTES):
                break  # a gap or a damaged record stays as it is, and so does everything after it
            record = record_parts(seq, (records / record_name(seq)).read_bytes())
            if record[1] == UNREADABLE:
                break
            batch.append(record)
            size += len(record[2])
        if not batch:
            return
        self._write_file(records, segment_name(batch[0][0], batch[-1][0]), segment_bytes(batch))
        crashpoints.hit("file.pack.segment_written")
        for n, (seq, _, _, _) in enumerate(batch):
            os.unlink(records / record_name(seq))
            if n == len(batch) // 2:
                crashpoints.hit("file.pack.unlinking")
        fsync_dir(records)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        for before, after in itertools.pairwise(saves):
            if after.seq != before.seq + 1:
                raise ValueError("rewrite needs save records with consecutive seqs")
        if any(save.run_id != run_id for save in saves):
            raise ValueError(f"every save record given to rewrite must belong to run {run_id!r}")
        with self._writing(run_id, "rewrite") as run_dir:
            self._check_fence(run_dir, fence)
            self._settle(run_dir)
            if self._head(run_dir) != expect_seq:
                raise Refused
            # Ledger first, as in append.
            self._write_ledger(run_dir, [seal(entry) for save in saves for entry in save.ledger])
            self._swap_records(run_dir, saves)

    def _swap_records(self, run_dir: Path, saves: Sequence[EncodedSave]) -> None:
        records, new, old = run_dir / "records", run_dir / "records.new", run_dir / "records.old"
        swapped = False
        try:
            os.mkdir(new, self.dir_mode)
            for save in saves:
                with open(new / record_name(save.seq), "xb", opener=self._opener) as handle:
                    handle.write(record_bytes(save))
                    handle.flush()
                    os.fsync(handle.fileno())
            os.close(os.open(new / head_name(saves[-1].seq), os.O_WRONLY | os.O_CREAT, self.file_mode))
            fsync_dir(new)
            fsync_dir(run_dir)
            crashpoints.hit("file.before_rename")
            os.rename(records, old)
            crashpoints.hit("file.rewrite_between_renames")
            os.rename(new, records)
            swapped = True
            crashpoints.hit("file.after_rename")
            fsync_dir(run_dir)
        except OSError as exc:
            if swapped:
                # The swap is visible but not durable: undo it, so a failed rewrite changes nothing.
                with suppress(OSError):
                    os.rename(records, new)
                    os.rename(old, records)
                    swapped = False
                    fsync_dir(run_dir)
            raise unavailable(exc, getattr(exc, "filename", None) or new, "rewrite the records in") from exc
        finally:
            if not swapped:
                # The rewrite did not happen: put the old records back, drop the new ones.
                if not records.exists() and old.is_dir():
                    with suppress(OSError):
                        os.rename(old, records)
                remove_tree(new)
        remove_tree(old)

    def _summary(self, run_id: str, run_dir: Path) -> RunSummary | None:
        """The run's summary from the header of its last readable record; None if it has none."""
        records = run_dir / "records"
        for seq in reversed(record_seqs(records)):
            try:
                with open(records / record_name(seq), "rb") as handle:
                    return parse_summary(run_id, handle.readline(HEADER_CAP))
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, RecursionError):
                continue  # a damaged header: the record before it still describes the run
        return None

    def list_summaries(self) -> list[RunSummary]:
        rows = []
        with translating("list the runs in", self._runs):
            run_ids = self._run_ids()
        for run_id in run_ids:
            with self._holding(run_id, "read", exclusive=False) as run_dir:
                summary = self._summary(run_id, run_dir) if run_dir is not None else None
            if summary is not None:
                rows.append(summary)
        return rows

    def remove_run(self, run_id: str) -> None:
        trash = self._trash / f"{run_id}.{secrets.token_hex(8)}"
        with self._holding(run_id, "delete", exclusive=True) as run_dir:
            if run_dir is None:
                return
            # One rename makes the whole run disappear at once; waiting lockers notice and retry.
            os.rename(run_dir, trash)
            fsync_dir(self._runs)
        remove_tree(trash)


class FileStore(Store):
    """A run store in a directory: one JSON file per save point (``Store``'s rules over
    ``FileBackend``)."""

    backend: FileBackend

    def __init__(self, path: str | os.PathLike[str], *, url: str | None = None, mode: int = PRIVATE_FILE_MODE) -> None:
        super().__init__(FileBackend(path, url=url, mode=mode))

    @property
    def root(self) -> Path:
        """The store's directory."""
        return self.backend.root
