"""An owner name made before a fork names the process that reads it (``owners.ProcessOwner``)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from unbroken import owners
from unbroken.owners import ProcessOwner

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def in_forked_child(check: Callable[[], bool], seconds: float = 10.0) -> int:
    """Run ``check`` in a forked child: its exit status (0 true, 1 false, 2 raised, -9 hung)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -9


def test_a_name_is_kept_in_its_process_and_made_anew_in_a_forked_child() -> None:
    name = ProcessOwner()
    first = name.name
    assert first == name.name and first.split(":")[1] == str(os.getpid())

    def child_has_its_own() -> bool:
        mine = name.name
        return mine != first and mine.split(":")[1] == str(os.getpid()) and name.name == mine

    assert in_forked_child(child_has_its_own) == 0
    assert name.name == first  # the parent's is unchanged


def test_a_lock_held_by_another_thread_at_the_fork_does_not_hang_the_child() -> None:
    def uses_it() -> bool:
        owners.begin_use("x")
        return owners.owner_is_alive("x")

    with owners._lock:  # as another thread of the parent holding it at the fork
        status = in_forked_child(uses_it)
    assert status == 0
