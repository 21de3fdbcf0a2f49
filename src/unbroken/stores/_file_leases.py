"""The run head's lease half in a file store: ``runs/<run_id>/lease.json`` (and ``lease.prev.json``,
the generation before, from which a damaged lease's fence is rebuilt), read and replaced under the
run's exclusive lock. The head's seq is the head marker in ``records/`` (``files.py``). Expiry uses
the local clock: a file store serves one machine.
"""

from __future__ import annotations

from pathlib import Path

from .. import clock
from ._file_format import lease_bytes, lease_state
from ._file_runs import RunDirectories
from .backend import Refused, RunHead


class LeaseFiles(RunDirectories):
    """The head primitives of ``FileStore``, and the fence check its writes make."""

    def store_time(self) -> float:
        return clock.wall()  # one machine, one clock

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
