"""The run head's lease half in a file store: ``runs/<run_id>/lease.json`` (and ``lease.prev.json``,
the generation before, from which a damaged lease's fence is rebuilt), read and replaced under the
run's exclusive lock. The head's seq is the head marker in ``records/`` (``files.py``). Expiry is on
the boot clock (``_boot_lease_clock``): a file store serves one machine; each boot's number is a
file ``lease-clock/<boot id>`` created once, by whichever process of that boot comes first.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from .. import clock
from ..errors import StoreUnavailable
from ._boot_lease_clock import BootLeaseClock
from ._durable import create_file, fsync_dir, make_dirs
from ._file_format import lease_bytes, lease_state
from ._file_runs import RunDirectories
from .backend import Refused, RunHead


class LeaseFiles(RunDirectories):
    """The head primitives of ``FileStore``, and the fence check its writes make."""

    root: Path
    file_mode: int
    dir_mode: int
    _lease_clock: BootLeaseClock

    def store_time(self) -> float:
        return clock.wall()

    def lease_time(self) -> float:
        return self._lease_clock.now()

    def _number_boot(self, boot: str) -> int:
        """The boot number of ``boot`` in this store: 1 + the highest given so far, fixed by the
        first process of that boot to create ``lease-clock/<boot>`` (create-if-absent by link)."""
        folder = self.root / "lease-clock"
        name = re.sub(r"[^A-Za-z0-9_-]", "_", boot)
        try:
            make_dirs(folder, self.dir_mode)
            known = folder / name
            if not known.exists():
                numbers = [int(p.read_text()) for p in folder.iterdir() if not p.name.startswith(".")]
                temporary = folder / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
                descriptor = create_file(temporary, self.file_mode)
                try:
                    os.write(descriptor, str(max(numbers, default=0) + 1).encode())
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
                try:
                    os.link(temporary, known)  # fails if another process of this boot came first
                except FileExistsError:
                    pass
                finally:
                    temporary.unlink()
                fsync_dir(folder)
            return int(known.read_text())
        except (OSError, ValueError) as exc:
            raise StoreUnavailable(f"file store {self.root}: cannot read or set the lease clock ({exc})") from exc

    def _check_fence(self, run_dir: Path, fence: int | None) -> None:
        if fence is not None and lease_state(run_dir)[1] != fence:
            raise Refused

    def _read_head(self, run_dir: Path) -> RunHead | None:
        if not run_dir.is_dir():
            return None
        owner, fence, expires = lease_state(run_dir)
        return RunHead(self._head(run_dir) if (run_dir / "records").is_dir() else 0, fence, owner, expires)

    def read_head(self, run_id: str) -> RunHead | None:
        with self._holding(run_id, "read the head of", exclusive=False) as run_dir:
            return self._read_head(run_dir) if run_dir is not None else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        with self._writing(run_id, "take the lease of") as run_dir:
            current = self._read_head(run_dir)
            if current != expected and not (expected is None and current == RunHead()):
                return False
            if current is not None and current.fence and new.fence != current.fence:
                prev = lease_bytes(current.owner, current.fence, current.expires_at)
                self._write_file(run_dir, "lease.prev.json", prev, sync_dir=False)
            self._write_file(run_dir, "lease.json", lease_bytes(new.owner, new.fence, new.expires_at))
        return True
