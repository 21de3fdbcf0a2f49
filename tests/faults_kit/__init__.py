"""Fault injection for the reliability tests: power loss, torn and flipped records, disk errors.

Test machinery: it lives in the repository (tests/faults_kit), never in the installed package.

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

The modules, one idea each: ``_bit_flips`` (damaged records), ``_recorder`` (what each fsync
made durable), ``_fsync_hook`` (the same for fsyncs made from C), ``_crash_images`` (the trees
a crash may leave), ``_power_loss`` (record a run, check every image), ``_power_loss_child``
(the recording process), ``_disk`` (ENOSPC and EIO at a chosen operation).
"""

from __future__ import annotations

from ._bit_flips import flip_bits
from ._crash_images import CrashImage, PowerLossLog
from ._disk import FAULT_OPS, DiskFaults, FailingConnection
from ._fsync_hook import install_preload_hook, preload_library
from ._power_loss import PowerLossResult, check_power_loss, record_power_loss_run
from ._power_loss_child import main
from ._recorder import DirEntries, PowerLossRecorder

__all__ = [
    "FAULT_OPS",
    "CrashImage",
    "DirEntries",
    "DiskFaults",
    "FailingConnection",
    "PowerLossLog",
    "PowerLossRecorder",
    "PowerLossResult",
    "check_power_loss",
    "flip_bits",
    "install_preload_hook",
    "main",
    "preload_library",
    "record_power_loss_run",
]
