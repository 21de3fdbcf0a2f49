"""Who holds a lease, and whether that holder is provably dead or provably alive on this host.

An owner is named ``host:pid:start:nonce:boot:pidns``: the host name, the process id, its
start time (clock ticks since boot), a random nonce, the boot id
(``/proc/sys/kernel/random/boot_id``) and the inode of its PID namespace
(``/proc/self/ns/pid``). Only on the same host, boot and PID namespace can anything be proven:

* **dead**: its pid is gone, a zombie, or belongs to a process with another start time; or it
  names a call of this process that has ended (``mark_ended``). Its run is taken over at once.
* **alive**: its process runs (frozen or not) with that start time; for an owner of this very
  process, a call of ours under that name is still in progress, or a tool it started may still
  act (``LeaseGuard.finish``). Its run is never taken over, whatever any clock says about its
  lease: a step of a wall clock cannot make a live holder look gone.

Anything else (a container with its own PID namespace, another boot or host, a name of the older
4-part form ``host:pid:start:nonce``, a name chosen by the caller) is neither: it is replaced only
once its lease expires on the store's lease clock, and a takeover then waits the grace period
before it trusts a "not executed" probe (``fencing.LeaseGuard``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict

from . import clock


def _host_name() -> str:
    """This host's name, as ``socket.gethostname()`` gives it (``uname`` where there is one: the
    socket module costs ~5 ms to import on the resume path, issue 24)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def _read_text(path: str) -> str:
    with open(path) as file:  # the locale's encoding, as Path.read_text: /proc text
        return file.read()


_HOST = _host_name()
_ENDED_KEPT = 4096  # ended owner names remembered; a forgotten one falls back to the lease clock (safe)

_lock = threading.Lock()
_ended: OrderedDict[str, None] = OrderedDict()
_in_use: Counter[str] = Counter()  # owner -> calls of this process holding a lease under it (or its tools)
_acting: Counter[tuple[str, str]] = Counter()  # (owner, run_id) -> tools of ours that may still act


def _forked() -> None:
    """In a forked child: a lock another thread of the parent held at the fork stays held forever."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks since boot) of ``pid`` from /proc, or None."""
    try:
        stat = _read_text(f"/proc/{pid}/stat")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _boot_id() -> str:
    try:
        return _read_text("/proc/sys/kernel/random/boot_id").strip().replace(":", "")
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def make_owner() -> str:
    """A name for this process as a lease owner (see the module docstring)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    start = stat[1] if stat else "0"
    return f"{_HOST}:{pid}:{start}:{os.urandom(4).hex()}:{_boot_id()}:{_pid_namespace()}"


class ProcessOwner:
    """An owner name that always names the process using it: made at first, and made again in a
    child forked after it (a pre-forking server builds its ``Agent``, then forks its workers).
    A name made in the parent names the parent's pid and start time: a worker holding a run
    under it would be judged by the parent's life, so proven dead (and its run taken over while
    it still acts) once the parent exits or its pid is reused, and alive long after the worker
    itself died. Each forked child gets a name of its own, and two children never share one."""

    def __init__(self) -> None:
        self._made: tuple[int, str] = (os.getpid(), make_owner())

    @property
    def name(self) -> str:
        pid, name = self._made
        if pid == os.getpid():
            return name
        with _lock:  # once per forked child (two threads of it must not get two names)
            if self._made[0] != os.getpid():
                self._made = (os.getpid(), make_owner())
            return self._made[1]


def _local_pid(owner: str) -> tuple[int, str] | None:
    """(pid, start ticks) when ``owner`` names a process of this host, boot and PID namespace."""
    parts = owner.split(":")
    if len(parts) != 6:
        return None
    host, pid_text, start, _nonce, boot, namespace = parts
    if host != _HOST or not pid_text.isdigit() or not start.isdigit() or start == "0":
        return None
    if not boot or boot != _boot_id() or not namespace or namespace != _pid_namespace():
        return None
    return int(pid_text), start


def _process_state(pid: int, start: str) -> str:
    """ "gone", "alive" or "unknown" for the process ``pid`` that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass  # it exists under another user: its start time still tells
    except OSError:
        return "unknown"
    stat = _proc_stat(pid)
    if stat is None:
        return "unknown"
    state, started = stat
    return "gone" if state in ("Z", "X") or started != start else "alive"


# ---------------------------------------------------------------------- this process's calls


def mark_ended(owner: str) -> None:
    """Record that the call of this process that held leases as ``owner`` has ended and nothing
    it started can still act: its lease, if it could not be released (the store was
    unreachable), is provably free to take over. Remembers the last 4,096 names."""
    with _lock:
        _ended[owner] = None
        _ended.move_to_end(owner)
        while len(_ended) > _ENDED_KEPT:
            _ended.popitem(last=False)


def begin_use(owner: str) -> None:
    """A call of this process holds (or is taking) a lease as ``owner``: it is alive."""
    with _lock:
        _in_use[owner] += 1


def end_use(owner: str) -> None:
    """The call that ``begin_use`` announced has ended, and nothing it started can still act."""
    with _lock:
        _in_use[owner] -= 1
        if _in_use[owner] <= 0:
            del _in_use[owner]


def begin_acting(owner: str, run_id: str) -> None:
    """A tool of ours that is not read-only starts under ``owner`` for ``run_id``."""
    with _lock:
        _acting[(owner, run_id)] += 1


def end_acting(owner: str, run_id: str) -> int:
    """That tool has returned (or raised); how many of ours may still act for the run."""
    with _lock:
        key = (owner, run_id)
        _acting[key] -= 1
        left = _acting[key]
        if left <= 0:
            del _acting[key]
        return max(left, 0)


def still_acting(owner: str, run_id: str) -> int:
    """How many tools of this process started under ``owner`` for ``run_id`` may still act."""
    with _lock:
        return _acting.get((owner, run_id), 0)


# ---------------------------------------------------------------------- judging a holder


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` provably names a holder that can no longer act: a call of this
    process that has ended (``mark_ended``), or a process that has exited: same host, same boot,
    same PID namespace as this process, and its pid is gone, a zombie, or reused. False for
    anything that cannot be proven (including owner names of the older 4-part form)."""
    with _lock:
        if owner in _ended:
            return True
    local = _local_pid(owner)
    if local is None or local[0] == os.getpid():
        return False  # this very process is alive
    return _process_state(*local) == "gone"


def owner_is_alive(owner: str) -> bool:
    """True only when ``owner`` provably names a holder that may still act: a process of this
    host, boot and PID namespace that runs (even frozen) with the start time in its name, or,
    in this process, a call still in progress under that name or a tool it started that may
    still act. Such a holder's run is never taken over, whatever its lease's expiry says."""
    with _lock:
        if owner in _ended:
            return False
        if _in_use.get(owner, 0) > 0:
            return True
    local = _local_pid(owner)
    if local is None or local[0] == os.getpid():
        return False  # not ours to judge, or a name of this process that no call of ours uses
    return _process_state(*local) == "alive"


def describe_live(owner: str) -> str:
    """ "a live process on this host (pid N, since T)" for a holder ``owner_is_alive`` accepted."""
    local = _local_pid(owner)
    if local is None:
        return f"a live call of this process ({owner})"
    pid, start = local
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        from datetime import UTC, datetime

        uptime = float(_read_text("/proc/uptime").split()[0])
        started = clock.wall() - uptime + int(start) / ticks
        since = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OSError, ValueError):
        since = f"clock tick {start} since boot"
    which = " (this process)" if pid == os.getpid() else ""
    return f"a live process on this host (pid {pid}{which}, since {since}), owner {owner}"
