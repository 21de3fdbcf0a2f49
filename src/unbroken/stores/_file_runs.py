"""What ``FileStore``'s ledger and lease halves need from the store: a run's directory under its
lock, durable writes, and the runs it holds. ``FileStore`` (``files.py``) implements it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path

from ..state import RunSummary


class RunDirectories(ABC):
    """Locked, durable access to the run directories of one file store."""

    _runs: Path

    @abstractmethod
    def _run_dir(self, run_id: str) -> Path:
        """The run's directory (the run id checked first)."""

    @abstractmethod
    def _writing(self, run_id: str, doing: str) -> AbstractContextManager[Path]:
        """Hold the run's exclusive lock, creating the run directory if needed."""

    @abstractmethod
    def _holding(self, run_id: str, doing: str, *, exclusive: bool) -> AbstractContextManager[Path | None]:
        """Hold the run's lock with its records directory in place; None if the run does not exist."""

    @abstractmethod
    def _write_file(
        self, directory: Path, name: str, data: bytes, *, sync_dir: bool = True, undo: bool = False
    ) -> None:
        """Durably create or replace ``directory/name``."""

    @abstractmethod
    def _check_fence(self, run_dir: Path, fence: int | None) -> None:
        """Raise ``Refused`` unless ``fence`` is None or the run's current fence."""

    @abstractmethod
    def _head(self, run_dir: Path) -> int:
        """The run's head seq."""

    @abstractmethod
    def _run_ids(self) -> list[str]:
        """The ids of the runs in the store (staging directories and stray files left out)."""

    @abstractmethod
    def _summary(self, run_id: str, run_dir: Path) -> RunSummary | None:
        """The run's summary from its last readable record; None if it has none."""
