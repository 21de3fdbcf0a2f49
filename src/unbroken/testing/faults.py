"""Fault injection for the reliability tests: power loss, torn and flipped records, disk errors.

Power loss is simulated from a log, not by cutting power. A child process runs an agent on a
store under ``root`` while a ``PowerLossRecorder`` notes, at every ``fsync``/``fdatasync`` of a
file or directory under ``root``, exactly what that call made durable (the file's bytes, or
the directory's entries), plus a snapshot of the live tree and every save the store
acknowledged. Afterwards ``crash_images`` rebuilds, for a crash after any event, the tree a
strict POSIX file system may hold: directory entries survive only if their directory was
fsynced, file bytes only if the file was; everything else is dropped (the worst case) or, in
seeded random variants, kept, torn at a random byte, or mixed sector by sector (reordered).

The file store calls ``os.fsync`` from Python, so the recorder wraps it (and can drop the
fsync of one call site, for the mutation check). SQLite calls ``fsync``/``fdatasync`` from C,
so its child is started with a tiny ``LD_PRELOAD`` library (compiled on first use with the
system C compiler) that calls back into the recorder after each successful call.

Only inode numbers identify files, so run the child on tmpfs (``/dev/shm``), which never
reuses an inode number within a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..codec import StoredRecord

# --------------------------------------------------------------------------- torn and flipped records


def flip_bits(record: StoredRecord, rng: random.Random, count: int) -> StoredRecord:
    """``record`` with ``count`` distinct random bits flipped in its body (or, one time in ten,
    its stored checksum); invalid UTF-8 is read back with replacement characters, as stores do."""
    target = record.checksum if rng.random() < 0.1 else record.body
    data = bytearray(target.encode() if isinstance(target, str) else target)
    for bit in rng.sample(range(len(data) * 8), min(count, len(data) * 8)):
        data[bit // 8] ^= 1 << (bit % 8)
    damaged = data.decode("utf-8", errors="replace")
    if target is record.checksum:
        return StoredRecord(record.seq, record.body, damaged)
    return StoredRecord(record.seq, damaged, record.checksum)


# --------------------------------------------------------------------------- power loss: recording

_SKIP_SUFFIXES = ("-shm",)  # SQLite's shared-memory index: rebuilt from the WAL, never durable data

DirEntries = dict[str, list[Any]]  # name -> [inode, is_dir]


@dataclass
class _Live:
    root: int
    dirs: dict[int, DirEntries] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)


class PowerLossRecorder:
    """Records what each fsync under ``root`` made durable (see the module docstring)."""

    def __init__(self, root: Path, *, drop_sites: frozenset[str] = frozenset()) -> None:
        self.root = root.resolve()
        self.drop_sites = drop_sites
        self.blobs: dict[str, bytes] = {}
        self.events: list[dict[str, Any]] = []
        self.sites: dict[str, str] = {}
        start = self._live()
        self.events.append({"kind": "start", "live": _live_json(start)})

    # the durable model ------------------------------------------------------------

    def _blob(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()[:32]
        self.blobs.setdefault(digest, data)
        return digest

    def _live(self) -> _Live:
        live = _Live(os.stat(self.root).st_ino)
        for directory, names, files in os.walk(self.root):
            entries: DirEntries = {}
            for name in names:
                entries[name] = [os.lstat(os.path.join(directory, name)).st_ino, True]
            for name in files:
                if name.endswith(_SKIP_SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode):
                    continue
                entries[name] = [info.st_ino, False]
                try:
                    with open(path, "rb") as handle:
                        live.files[info.st_ino] = self._blob(handle.read())
                except FileNotFoundError:
                    entries.pop(name)
            live.dirs[os.stat(directory).st_ino] = entries
        return live

    def synced(self, fd: int, site: str) -> None:
        """Called right after a successful fsync/fdatasync of ``fd``."""
        try:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return
        if path != self.root and self.root not in path.parents:
            return
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            entries: DirEntries = {}
            for entry in os.scandir(path):
                if entry.name.endswith(_SKIP_SUFFIXES):
                    continue
                if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    entries[entry.name] = [entry.inode(), entry.is_dir(follow_symlinks=False)]
            event: dict[str, Any] = {"kind": "dir", "ino": info.st_ino, "entries": entries}
        elif stat.S_ISREG(info.st_mode):
            with open(f"/proc/self/fd/{fd}", "rb") as handle:  # fd itself may be write-only
                event = {"kind": "file", "ino": info.st_ino, "blob": self._blob(handle.read())}
        else:
            return
        event["site"] = site
        event["path"] = str(path.relative_to(self.root))
        self.sites.setdefault(site, f"{event['kind']} {event['path']}")
        event["live"] = _live_json(self._live())
        self.events.append(event)

    def acked(self, seq: int | None, ledger: list[tuple[str, float]]) -> None:
        """A store call returned: save ``seq`` (None for a ledger-only write) is acknowledged."""
        self.events.append({"kind": "ack", "seq": seq, "ledger": [list(item) for item in ledger]})

    # installation -----------------------------------------------------------------

    def install_python_fsync(self, site_module: str = "stores/files.py") -> None:
        """Wrap ``os.fsync``/``os.fdatasync``: record each call, or drop it if its call site
        (the first frame in ``site_module`` outside ``_fsync_dir``) is in ``drop_sites``."""
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)
            setattr(os, name, self._wrap(real, site_module))

    def _wrap(self, real: Callable[[int], None], site_module: str) -> Callable[[Any], None]:
        def fsync(fd: Any) -> None:
            number = fd if isinstance(fd, int) else fd.fileno()
            site = _call_site(site_module)
            if site in self.drop_sites:
                return  # the mutation: this fsync "was removed"
            real(number)
            self.synced(number, site)

        return fsync

    def dump(self, out: Path) -> None:
        (out / "blobs").mkdir(parents=True, exist_ok=True)
        for digest, data in self.blobs.items():
            (out / "blobs" / digest).write_bytes(data)
        (out / "events.json").write_text(json.dumps({"events": self.events, "sites": self.sites}))


def _live_json(live: _Live) -> dict[str, Any]:
    return {"root": live.root, "dirs": {str(k): v for k, v in live.dirs.items()}, "files": live.files}


def _call_site(site_module: str) -> str:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.replace(os.sep, "/").endswith(site_module) and code.co_name != "_fsync_dir":
            return f"{code.co_name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "elsewhere"


_PRELOAD_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
typedef void (*ub_hook_t)(int fd);
static ub_hook_t ub_hook;
void ub_set_hook(ub_hook_t hook) { ub_hook = hook; }
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    if (rc == 0 && ub_hook) ub_hook(fd);
    return rc;
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int rc = real(fd);
    if (rc == 0 && ub_hook) ub_hook(fd);
    return rc;
}
"""


def preload_library() -> Path:
    """Build (once per source version) the fsync-hook library for ``LD_PRELOAD``."""
    digest = hashlib.sha256(_PRELOAD_SOURCE.encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"unbroken-fsync-hook-{digest}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    with tempfile.TemporaryDirectory() as build:
        source = Path(build) / "hook.c"
        source.write_text(_PRELOAD_SOURCE)
        built = Path(build) / "hook.so"
        command = [*compiler.split()[:1], "-shared", "-fPIC", "-O2", "-o", str(built), str(source), "-ldl"]
        subprocess.run(command, check=True, capture_output=True)
        os.replace(built, target)
    return target


_HOOK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int)
_hook_keepalive: list[Any] = []


def install_preload_hook(recorder: PowerLossRecorder, library: Path) -> None:
    """In a process started with ``LD_PRELOAD=library``: route its fsyncs to ``recorder``."""
    lib = ctypes.CDLL(str(library))
    callback = _HOOK_TYPE(lambda fd: recorder.synced(fd, "sqlite"))
    _hook_keepalive.append(callback)
    lib.ub_set_hook(callback)


# --------------------------------------------------------------------------- power loss: crash images


@dataclass(frozen=True)
class CrashImage:
    """The tree a crash after event ``event`` may leave, and what had been acknowledged by then."""

    event: int
    variant: int
    acked_seq: int
    acked_ledger: dict[str, float]


class PowerLossLog:
    """The recorder's output, read back in the parent."""

    def __init__(self, out: Path) -> None:
        data = json.loads((out / "events.json").read_text())
        self.events: list[dict[str, Any]] = data["events"]
        self.sites: dict[str, str] = data["sites"]
        self._blobs = out / "blobs"

    def blob(self, digest: str) -> bytes:
        return (self._blobs / digest).read_bytes()

    def crash_images(self, dest: Path, *, variants: int, rng: random.Random) -> Iterator[CrashImage]:
        """For each event, write into ``dest`` the worst-case image (variant 0) and ``variants``
        random reorderings, yielding after each. ``dest`` is emptied before each image."""
        start = self.events[0]["live"]
        durable_dirs: dict[int, DirEntries] = {int(k): v for k, v in start["dirs"].items()}
        durable_files: dict[int, str] = {int(k): v for k, v in start["files"].items()}
        root = int(start["root"])
        acked_seq = 0
        acked_ledger: dict[str, float] = {}
        live = start
        changed = True
        for index, event in enumerate(self.events):
            kind = event["kind"]
            if kind == "dir":
                durable_dirs[event["ino"]] = event["entries"]
                changed = True
            elif kind == "file":
                durable_files[event["ino"]] = event["blob"]
                changed = True
            elif kind == "ack":
                if event["seq"] is not None:
                    acked_seq = max(acked_seq, event["seq"])
                for key, updated in event["ledger"]:
                    acked_ledger[key] = max(acked_ledger.get(key, 0.0), updated)
                changed = True
            live = event.get("live", live)
            if not changed:
                continue
            changed = False
            for variant in range(variants + 1):
                self._write(dest, root, durable_dirs, durable_files, live, rng if variant else None)
                yield CrashImage(index, variant, acked_seq, dict(acked_ledger))

    def _write(
        self,
        dest: Path,
        root: int,
        durable_dirs: dict[int, DirEntries],
        durable_files: dict[int, str],
        live: dict[str, Any],
        rng: random.Random | None,
    ) -> None:
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        live_dirs = {int(k): v for k, v in live["dirs"].items()}
        live_files = {int(k): v for k, v in live["files"].items()}

        def entries_of(ino: int) -> DirEntries:
            durable = durable_dirs.get(ino, {})
            if rng is not None and ino in live_dirs and rng.random() < 0.5:
                later: DirEntries = live_dirs[ino]
                return later  # the directory's later changes reached the disk too
            return durable

        def bytes_of(ino: int) -> bytes:
            durable = self.blob(durable_files[ino]) if ino in durable_files else b""
            if rng is None or ino not in live_files:
                return durable
            current = self.blob(live_files[ino])
            if current == durable:
                return durable
            choice = rng.randrange(4)
            if choice == 1:
                return current
            if choice == 2:  # torn: only part of the unsynced tail reached the disk
                return current[: rng.randint(min(len(durable), len(current)), len(current))]
            if choice == 3:  # reordered: each 512-byte sector old or new
                size = rng.choice([len(durable), len(current)])
                mixed = bytearray()
                for offset in range(0, size, 512):
                    source = current if rng.random() < 0.5 else durable
                    chunk = source[offset : offset + 512]
                    mixed += chunk + b"\0" * (min(512, size - offset) - len(chunk))
                return bytes(mixed)
            return durable

        seen: set[int] = set()

        def build(ino: int, path: Path) -> None:
            if ino in seen:
                return
            seen.add(ino)
            for name, (child, is_dir) in entries_of(ino).items():
                target = path / name
                if is_dir:
                    target.mkdir(exist_ok=True)
                    build(child, target)
                else:
                    target.write_bytes(bytes_of(child))

        build(root, dest)


@dataclass
class PowerLossResult:
    """What the crash images showed. Every count but ``images`` must be 0."""

    crash_points: int = 0
    images: int = 0
    acked_saves_lost: int = 0
    acked_ledger_lost: int = 0
    corrupt_loads: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return self.acked_saves_lost + self.acked_ledger_lost + self.corrupt_loads


def check_power_loss(
    log: PowerLossLog,
    *,
    url_for: Callable[[Path], str],
    run_id: str,
    dest: Path,
    variants: int,
    seed: int,
) -> PowerLossResult:
    """Open the store on every crash image: it must load without ``CorruptCheckpoint`` and
    hold every save and ledger write acknowledged before the crash."""
    from ..errors import CorruptCheckpoint, RunNotFound, StoreUnavailable
    from ..stores import open_store

    result = PowerLossResult()
    events: set[int] = set()
    for image in log.crash_images(dest, variants=variants, rng=random.Random(seed)):
        result.images += 1
        events.add(image.event)
        where = f"crash after event {image.event} (variant {image.variant})"
        last = 0
        try:
            store = open_store(url_for(dest))
        except StoreUnavailable as exc:
            result.corrupt_loads += 1
            result.examples.append(f"{where}: store does not open: {exc}")
            continue
        try:
            try:
                last = store.decode(run_id).last_seq
            except CorruptCheckpoint as exc:
                result.corrupt_loads += 1
                result.examples.append(f"{where}: {exc}")
                with contextlib.suppress(CorruptCheckpoint):
                    last = store.decode(run_id, recover=True).last_seq
            except RunNotFound:
                last = 0
            if last < image.acked_seq:
                result.acked_saves_lost += 1
                result.examples.append(f"{where}: save {image.acked_seq} was acknowledged, the store holds {last}")
            for key, updated in image.acked_ledger.items():
                try:
                    entry = store.ledger_get(run_id, key)
                except CorruptCheckpoint:
                    entry = None
                if entry is None or entry.updated_at < updated:
                    result.acked_ledger_lost += 1
                    result.examples.append(f"{where}: acknowledged ledger write of {key[:12]} is missing")
        finally:
            store.close()
    result.crash_points = len(events)
    return result


# --------------------------------------------------------------------------- power loss: the child


def _powerloss_child(args: dict[str, Any]) -> None:
    from ..chaos import WORLD_ENV, load_factory
    from ..stores import open_store

    root = Path(args["root"])
    out = Path(args["out"])
    os.environ[WORLD_ENV] = args["world"]
    recorder = PowerLossRecorder(root, drop_sites=frozenset(args.get("drop_sites", [])))
    if args.get("preload"):
        install_preload_hook(recorder, Path(args["preload"]))
    else:
        recorder.install_python_fsync()
    store = open_store(args["url"])
    _acknowledge(store, recorder)
    agent = load_factory(args["agent"])(store)
    try:
        agent.run(args["task"], run_id=args["run_id"])
    finally:
        store.close()
        recorder.dump(out)


def _acknowledge(store: Any, recorder: PowerLossRecorder) -> None:
    """Note in the log every store call that returned (so was acknowledged to the caller)."""
    append, claim, put = store.append, store.ledger_claim, store.ledger_put

    def acked_append(save: Any, **kwargs: Any) -> None:
        append(save, **kwargs)
        recorder.acked(save.seq, [(entry.key, entry.updated_at) for entry in save.ledger])

    def acked_claim(entry: Any, **kwargs: Any) -> Any:
        stored, created = claim(entry, **kwargs)
        recorder.acked(None, [(stored.key, stored.updated_at)])
        return stored, created

    def acked_put(entry: Any, **kwargs: Any) -> None:
        put(entry, **kwargs)
        recorder.acked(None, [(entry.key, entry.updated_at)])

    store.append, store.ledger_claim, store.ledger_put = acked_append, acked_claim, acked_put


def record_power_loss_run(
    *,
    agent: str,
    task: str,
    url: str,
    root: Path,
    world: Path,
    out: Path,
    run_id: str = "powerloss",
    preload: Path | None = None,
    drop_sites: frozenset[str] = frozenset(),
) -> PowerLossLog:
    """Run the agent to completion in a fresh interpreter, recording what each fsync made
    durable. ``preload``: the hook library (for SQLite). ``drop_sites``: file-store fsync call
    sites to remove (the mutation check)."""
    args = {
        "agent": agent,
        "task": task,
        "url": url,
        "root": str(root),
        "world": str(world),
        "out": str(out),
        "run_id": run_id,
        "preload": str(preload) if preload else None,
        "drop_sites": sorted(drop_sites),
    }
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = str(preload)
    completed = subprocess.run(
        [sys.executable, "-m", "unbroken.testing.faults", "powerloss-child", json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"power-loss child failed: {completed.stderr[-2000:]}")
    return PowerLossLog(out)


# --------------------------------------------------------------------------- disk faults


FAULT_OPS = ("write", "flush", "fsync", "dirsync", "rename")


class DiskFaults:
    """Fail the ``fail_at``-th disk operation (counting writes, flushes, fsyncs, directory
    fsyncs and renames done through ``os`` and the file objects ``open`` returns in
    ``module``) with ``OSError(code)``. With ``fail_at=None`` it only counts, into ``ops``."""

    def __init__(self, module: Any, fail_at: int | None = None, code: int = errno.EIO) -> None:
        self.module = module
        self.fail_at = fail_at
        self.code = code
        self.ops: list[str] = []
        self.failed: str | None = None
        self._saved: list[tuple[Any, str, Any]] = []

    def _tick(self, op: str) -> None:
        self.ops.append(op)
        if self.fail_at is not None and len(self.ops) == self.fail_at:
            self.failed = op
            raise OSError(self.code, f"{os.strerror(self.code)} (injected at {op})")

    def __enter__(self) -> DiskFaults:
        real_fsync, real_rename, real_replace = os.fsync, os.rename, os.replace
        real_open = open

        def fsync(fd: Any) -> None:
            number = fd if isinstance(fd, int) else fd.fileno()
            self._tick("dirsync" if stat.S_ISDIR(os.fstat(number).st_mode) else "fsync")
            real_fsync(number)

        def rename(src: Any, dst: Any) -> None:
            self._tick("rename")
            real_rename(src, dst)

        def replace(src: Any, dst: Any) -> None:
            self._tick("rename")
            real_replace(src, dst)

        faults = self

        class _Faulty:
            def __init__(self, handle: Any) -> None:
                self._handle = handle

            def write(self, data: Any) -> Any:
                faults._tick("write")
                return self._handle.write(data)

            def flush(self) -> None:
                faults._tick("flush")
                self._handle.flush()

            def __getattr__(self, name: str) -> Any:
                return getattr(self._handle, name)

            def __enter__(self) -> _Faulty:
                return self

            def __exit__(self, *exc: object) -> None:
                self._handle.close()

        def faulty_open(*args: Any, **kwargs: Any) -> Any:
            handle = real_open(*args, **kwargs)
            mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
            return _Faulty(handle) if any(flag in mode for flag in "wxa+") else handle

        self._patch(os, "fsync", fsync)
        self._patch(os, "rename", rename)
        self._patch(os, "replace", replace)
        self._patch(self.module, "open", faulty_open)
        return self

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def __exit__(self, *exc: object) -> None:
        for owner, name, value in reversed(self._saved):
            if value is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)
        self._saved.clear()


_MISSING = object()


class FailingConnection:
    """Wraps a ``sqlite3.Connection``: the ``fail_at``-th ``execute`` raises the error SQLite
    gives for a full disk (``SQLITE_FULL``) or an I/O error (``SQLITE_IOERR``), as the driver
    would. (SQLite's own writes cannot be reached from Python; this injects at the boundary.)"""

    def __init__(self, conn: Any, fail_at: int | None, message: str) -> None:
        self._conn = conn
        self.fail_at = fail_at
        self.message = message
        self.calls: list[str] = []

    def execute(self, sql: str, *args: Any) -> Any:
        self.calls.append(sql.split()[0].upper())
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            import sqlite3

            raise sqlite3.OperationalError(self.message)
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "powerloss-child":
        _powerloss_child(json.loads(argv[1]))
        return 0
    print("usage: python -m unbroken.testing.faults powerloss-child JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
