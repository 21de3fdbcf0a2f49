"""Durable file-system primitives for the file store, and the one translation of ``OSError``.

A new directory entry (a created file or directory, a rename) survives power loss only once its
parent directory is fsynced: ``fsync_dir`` and ``make_dirs`` do that. Every ``OSError`` leaves
the store as a ``StoreUnavailable`` that names the path and says what to do about it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import StoreUnavailable

TYPE_CHECKING = False
if TYPE_CHECKING:  # (pathlib, and urllib.parse which it imports: ~3-5 ms a resume of a SQLite run need not pay)
    from pathlib import Path


def unavailable(exc: OSError, path: object, doing: str) -> StoreUnavailable:
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


@contextmanager
def translating(doing: str, path: object) -> Iterator[None]:
    """Raise any ``OSError`` inside as ``unavailable(...)`` (the failing file named if known)."""
    try:
        yield
    except OSError as exc:
        raise unavailable(exc, getattr(exc, "filename", None) or path, doing) from exc


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Runs hold what users typed and what tools returned: files a store creates are its owner's
# alone unless the store URL asks otherwise (``?mode=0640``). Directories get the matching
# execute bits (0600 -> 0700, 0640 -> 0750).
PRIVATE_FILE_MODE = 0o600


def directory_mode(file_mode: int) -> int:
    """The directory mode that goes with ``file_mode``: execute wherever read is allowed."""
    return file_mode | ((file_mode & 0o444) >> 2)


def create_file(path: Path | str, file_mode: int = PRIVATE_FILE_MODE) -> int:
    """Create ``path`` (it must not exist) for writing with ``file_mode``; returns the descriptor."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode)


def opener(file_mode: int) -> Callable[[str, int], int]:
    """An ``opener`` for ``open(path, "xb", opener=...)`` that creates files with ``file_mode``."""

    def open_with_mode(path: str, flags: int) -> int:
        return os.open(path, flags, file_mode)

    return open_with_mode


def make_dirs(path: Path, mode: int = 0o700) -> None:
    """Create ``path`` and missing parents (with ``mode``), fsyncing each parent so the new
    entries survive."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            if not directory.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "a regular file is in the way", str(directory)) from None
        fsync_dir(directory.parent)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it, ignoring errors (used on leftovers only)."""
    import shutil  # (here: it loads bz2 and lzma, ~2 ms a store's open never needs)

    shutil.rmtree(path, ignore_errors=True)
