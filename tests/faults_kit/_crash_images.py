"""Power loss, replaying: the trees a strict POSIX file system may hold after a crash.

Directory entries survive only if their directory was fsynced, file bytes only if the file
was; everything else is dropped (the worst case) or, in seeded random variants, kept, torn at
a random byte, or mixed sector by sector (reordered)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._recorder import DirEntries


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
