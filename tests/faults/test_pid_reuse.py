"""A lease holder's pid reused by another process, with real processes.

A holder is named with its host, pid and start time (``owners``). Process A takes a run's lease
and is SIGKILLed; a new process B is forced onto A's pid (``ns_last_pid``) and lives on. A
resume from process C must take the run over at once (A is dead: B's start time is not A's) and
never charge twice. With ``ZOMBIE_WITHOUT_FENCING=start-time`` (a holder judged by its pid alone)
C is refused: B's pid "is" the holder.

The converse: a live holder whose start time cannot be read (its /proc entry hidden from the
taker, or a name written without a start time) is possibly alive: refused while its lease lasts,
never taken over at once. With ``ZOMBIE_WITHOUT_FENCING=unreadable-start`` (such a holder counted
as gone) it is taken over and the side effect happens twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from zombie_world import RUN_ID, ZombieWorld

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "redis"))

from pgtest import fresh_schema
from redistest import drop_prefix, require_server, server_url
from redistest import store_url as redis_store_url

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
HOLDER_TTL = "60"  # A's lease outlives the test: C can take the run only by proving A dead


@pytest.fixture(params=["sqlite", "file", pytest.param("postgres", marks=pytest.mark.postgres), "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The run, on each store whose state several processes share (no memory of their own)."""
    if request.param == "postgres":
        with fresh_schema("pidreuse") as (_, url):
            yield url
    elif request.param == "redis":
        require_server()
        prefix = f"ubt-pidreuse-{tmp_path.name[-12:]}"
        yield redis_store_url(server_url(), prefix)
        drop_prefix(server_url(), prefix)
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield f"file://{tmp_path / 'runs'}"


def start_ticks(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2 :].split()[19]


def spawn_with_pid(pid: int, seconds: float = 20.0) -> subprocess.Popen[str] | None:
    """A new process (``sleep``) with pid ``pid``: ``pid - 1`` is written to ``ns_last_pid`` just
    before each fork, until no other process on the machine took that pid first. None when
    another process (or thread) of the machine got the pid meanwhile: it lives with it, which
    is the same reuse, just not ours."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}").exists():
            return None
        try:
            NS_LAST_PID.write_text(str(pid - 1))
        except OSError as exc:
            pytest.skip(f"{NS_LAST_PID} is not writable ({exc}): a pid cannot be reused on purpose without root")
        process = subprocess.Popen(["sleep", "600"], text=True)
        if process.pid == pid:
            return process
        process.kill()
        process.wait()
    raise AssertionError(f"no new process got pid {pid} in {seconds:g}s")


def holder_killed_and_pid_reused(world: ZombieWorld, pause: str) -> None:
    """A holds the run (paused at ``pause`` inside its tool) and is SIGKILLed; B gets its pid."""
    first = world.start("first", "--pause", pause, "--ttl", HOLDER_TTL)
    world.wait_for("first", "paused", first)
    head = world.store.backend.read_head(RUN_ID)
    assert head is not None and head.owner is not None
    _host, pid, start, *_ = head.owner.split(":")
    assert int(pid) == first.pid and start == start_ticks(first.pid)
    first.kill()
    first.communicate()  # reaped: the pid is free
    reuser = spawn_with_pid(first.pid)
    if reuser is not None:
        world.processes.append(reuser)  # killed at the end like the others
    assert start_ticks(first.pid) != start  # B lives with A's pid, not A's start time


def test_a_killed_holders_pid_reused_before_it_charged_the_run_is_taken_over_at_once(world: ZombieWorld) -> None:
    holder_killed_and_pid_reused(world, "tool-wait")  # inside the tool, before the charge
    resumed = world.finish(world.start("third", "--ttl", "1"))
    assert resumed.get("status") == "completed", resumed
    assert world.charges() == 1


def test_a_killed_holders_pid_reused_after_it_charged_the_charge_is_not_repeated(world: ZombieWorld) -> None:
    holder_killed_and_pid_reused(world, "charged-wait")  # charged, not yet recorded
    assert world.charges() == 1
    resumed = world.finish(world.start("third", "--ttl", "1"))
    assert resumed.get("status") == "completed", resumed
    assert world.charges() == 1


# ---------------------------------------------------------------------- the converse


def proc_entry_hidden(pid: int, empty: Path) -> tuple[str, ...]:
    """A command prefix: run in a mount namespace of its own where ``/proc/<pid>`` is an empty
    directory (the process still exists, its start time cannot be read)."""
    empty.mkdir(exist_ok=True)
    script = f'mount --bind {empty} /proc/{pid} && exec "$@"'
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh")


def require_mount_namespace(tmp_path: Path) -> None:
    trial = subprocess.run(
        [*proc_entry_hidden(1, tmp_path / "empty"), "sh", "-c", "test ! -e /proc/1/stat"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if trial.returncode != 0:
        pytest.skip(f"cannot hide a /proc entry in a mount namespace (needs root): {trial.stderr.strip()}")


@pytest.mark.parametrize("store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_live_holder_whose_proc_entry_is_hidden_is_not_taken_over(world: ZombieWorld, tmp_path: Path) -> None:
    require_mount_namespace(tmp_path)
    first = world.start("first", "--pause", "tool-wait", "--ttl", "1")
    world.wait_for("first", "paused", first)  # inside the tool, before the charge, heartbeat running
    hidden = proc_entry_hidden(first.pid, tmp_path / "empty")
    second = world.finish(world.start("second", "--ttl", "1", prefix=hidden))
    world.charges_file.with_suffix(".txt.go").touch()
    woke = world.finish(first)
    assert world.charges() == 1, (second, woke)
    assert second.get("error") == "LeaseHeld" and woke["status"] == "completed", (second, woke)


@pytest.mark.parametrize("store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_live_holder_named_without_a_start_time_is_not_taken_over(world: ZombieWorld) -> None:
    first = world.start("first", "--owner-form", "no-start", "--pause", "tool-wait", "--ttl", "1")
    world.wait_for("first", "paused", first)
    second = world.finish(world.start("second", "--ttl", "1"))
    world.charges_file.with_suffix(".txt.go").touch()
    woke = world.finish(first)
    assert world.charges() == 1, (second, woke)
    assert second.get("error") == "LeaseHeld" and woke["status"] == "completed", (second, woke)


# ---------------------------------------------------------------------- a name made before a fork


@pytest.mark.parametrize("store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_run_held_by_a_forked_child_under_the_agents_name_outlives_the_parent_that_built_the_agent(
    world: ZombieWorld,
) -> None:
    # A pre-forking server builds the Agent, forks workers, and a worker runs a run under
    # agent.owner. Its name must name the worker, not the parent: once the parent is gone (or
    # its pid reused), a name of the parent's would be proven dead while the worker still acts.
    first = world.start("first", "--forked", "--pause", "tool-wait", "--ttl", HOLDER_TTL)
    world.wait_for("first", "paused", first)  # the forked child, inside the tool, before the charge
    worker = int(world.marker("first", "pid").read_text())
    try:
        head = world.store.backend.read_head(RUN_ID)
        assert head is not None and head.owner is not None
        assert head.owner.split(":")[1] == str(worker), (head.owner, first.pid, worker)
        world.marker("first", "orphan").touch()
        assert first.wait(timeout=30) == 0  # the parent is gone; its forked child runs on
        second = world.finish(world.start("second", "--ttl", "1"))
        world.charges_file.with_suffix(".txt.go").touch()
        woke = world.finish(first)  # the forked child's outcome (it holds the stdout pipe)
        assert world.charges() == 1, (second, woke)
        assert second.get("error") == "LeaseHeld" and woke["status"] == "completed", (second, woke)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
