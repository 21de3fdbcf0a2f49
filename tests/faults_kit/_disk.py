"""Disk faults: a full disk (ENOSPC) or an I/O error (EIO) at a chosen write, flush, fsync,
directory fsync or rename (file store), or at a chosen SQL statement (SQLite)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any

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
