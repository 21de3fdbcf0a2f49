"""Power loss, recording: what each fsync under ``root`` made durable, noted in the live process.

At every ``fsync``/``fdatasync`` of a file or directory under ``root``: the file's bytes or the
directory's entries, plus a snapshot of the live tree; and every save the store acknowledged.
The file store calls ``os.fsync`` from Python, so the recorder wraps it (and can drop the
fsync of one call site, for the mutation check); SQLite's fsyncs come through ``_fsync_hook``.
Only inode numbers identify files, so run the child on tmpfs (``/dev/shm``), which never
reuses an inode number within a run."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SKIP_SUFFIXES = ("-shm",)  # SQLite's shared-memory index: rebuilt from the WAL, never durable data

DirEntries = dict[str, list[Any]]  # name -> [inode, is_dir]


@dataclass
class _Live:
    root: int
    dirs: dict[int, DirEntries] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)


class PowerLossRecorder:
    """Records what each fsync under ``root`` made durable (see the package docstring)."""

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
