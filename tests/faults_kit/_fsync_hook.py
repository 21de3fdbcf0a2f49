"""Power loss, recording from C: an ``LD_PRELOAD`` library that reports SQLite's fsyncs.

SQLite calls ``fsync``/``fdatasync`` from C, out of reach of a Python wrapper, so its child is
started with this tiny library (compiled on first use with the system C compiler); it calls
back into the recorder after each successful call."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from ._recorder import PowerLossRecorder

_PRELOAD_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
typedef void (*ub_hook_t)(int fd);
static ub_hook_t ub_hook;
void ub_set_hook(ub_hook_t hook) { ub_hook = hook; }
/* fsync and fdatasync alike: call the real one, then the hook if it succeeded. */
#define UB_HOOKED(name)                                             \
    int name(int fd) {                                              \
        static int (*real)(int);                                    \
        if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, #name);    \
        int rc = real(fd);                                          \
        if (rc == 0 && ub_hook) ub_hook(fd);                        \
        return rc;                                                  \
    }
UB_HOOKED(fsync)
UB_HOOKED(fdatasync)
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
