"""The lease guard and owner identity, in one process: what ``check`` proves, what a takeover
knows about its predecessor, and who is provably dead."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unbroken import Agent, LeaseLost, ScriptedModel, Store, ToolCall, current_lease, open_store, owners, tool
from unbroken.leases import _boot_id, _pid_namespace, _proc_stat, make_owner, owner_is_dead, take_lease
from unbroken.state import LedgerEntry

RUN = "guarded-run"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The guard lives above the store and uses only its lease operations: one store suffices
    here (the process tests run on SQLite, the file store and PostgreSQL)."""
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def owner_of(pid: int, *, boot: str | None = None, old_format: bool = False) -> str:
    stat = _proc_stat(pid)
    assert stat is not None
    name = f"{socket.gethostname()}:{pid}:{stat[1]}:0123abcd"
    return name if old_format else f"{name}:{_boot_id() if boot is None else boot}:{_pid_namespace()}"


@pytest.fixture
def killed_process() -> Iterator[tuple[int, str, str, str]]:
    """A real process of this host, its owner names (new, old format, other boot) taken while
    it lived, then SIGKILLed and reaped."""
    child = subprocess.Popen(["sleep", "60"])
    names = (owner_of(child.pid), owner_of(child.pid, old_format=True), owner_of(child.pid, boot="another-boot"))
    assert not owner_is_dead(names[0])
    child.kill()
    child.wait()
    yield child.pid, *names


def test_a_killed_holder_of_this_host_boot_and_pid_namespace_is_provably_dead(
    killed_process: tuple[int, str, str, str],
) -> None:
    assert owner_is_dead(killed_process[1])


def test_a_killed_holder_named_in_the_old_four_part_form_is_not_judged_dead(
    killed_process: tuple[int, str, str, str],
) -> None:
    assert not owner_is_dead(killed_process[2])


def test_a_holder_from_another_boot_is_not_judged_dead(killed_process: tuple[int, str, str, str]) -> None:
    assert not owner_is_dead(killed_process[3])


def test_this_process_is_never_judged_dead() -> None:
    assert not owner_is_dead(make_owner())


def test_check_refuses_once_another_process_took_the_run_over(store: Store) -> None:
    guard = take_lease(store, RUN, make_owner(), 0.5)
    time.sleep(0.7)  # expired on the store's clock; nobody renewed it
    take_lease(store, RUN, make_owner(), 5)
    with pytest.raises(LeaseLost, match="no longer ours"):
        guard.check()


def test_check_refuses_when_every_renewal_is_too_slow_to_leave_enough_lease(store: Store) -> None:
    guard = take_lease(store, RUN, make_owner(), 0.5)
    renew = store.renew_lease

    def frozen_renewal(*args: object, **kwargs: object) -> object:
        time.sleep(0.35)  # this process stalls around each round trip: < 0.25 s (ttl / 2) is left
        return renew(*args, **kwargs)  # type: ignore[arg-type]

    store.renew_lease = frozen_renewal  # type: ignore[method-assign,assignment]
    with pytest.raises(LeaseLost, match="certainly left"):
        guard.check()


def test_a_lease_released_cleanly_lets_the_next_holder_trust_not_executed_at_once(store: Store) -> None:
    take_lease(store, RUN, make_owner(), 5).release()
    successor = take_lease(store, RUN, make_owner(), 5)
    assert successor.takeover.how == "released" and successor.absence_needs_wait() == 0


def test_a_lease_taken_after_expiry_waits_the_grace_before_trusting_not_executed(store: Store) -> None:
    take_lease(store, RUN, make_owner(), 0.3)
    time.sleep(0.5)
    successor = take_lease(store, RUN, make_owner(), 5, grace=3)
    assert successor.takeover.how == "expired_holder"
    assert 1.5 < successor.absence_needs_wait() <= 3


def in_doubt(fence: int | None) -> LedgerEntry:
    return LedgerEntry(RUN, "ub_key", "call_0", "charge", "h", "pending", 1, None, 1000.0, 1000.0, fence)


def test_an_attempt_started_before_our_predecessor_waits_the_full_grace_even_after_a_release(store: Store) -> None:
    older = take_lease(store, RUN, make_owner(), 5)  # its attempt may still be in flight
    older.release()
    predecessor = take_lease(store, RUN, make_owner(), 5)  # released cleanly
    predecessor.release()
    successor = take_lease(store, RUN, make_owner(), 5, grace=3)
    assert successor.takeover.how == "released" and successor.takeover.previous_fence == predecessor.fence
    assert older.fence < predecessor.fence < successor.fence
    assert successor.absence_needs_wait(in_doubt(predecessor.fence)) == 0  # the predecessor's own attempt
    assert successor.absence_needs_wait(in_doubt(successor.fence)) == 0  # our own attempt
    assert successor.absence_needs_wait(in_doubt(None)) == 0  # an entry written before fences were kept
    assert 2.5 < successor.absence_needs_wait(in_doubt(older.fence)) <= 3
    assert 2.5 < successor.absence_needs_wait(in_doubt(predecessor.fence - 1)) <= 3  # fences are not consecutive


def test_an_attempt_under_a_fence_above_our_predecessors_waits_the_full_grace(store: Store) -> None:
    """Only a store that lost data shows one (a live holder from before the loss): not trusted."""
    take_lease(store, RUN, make_owner(), 5).release()
    successor = take_lease(store, RUN, make_owner(), 5, grace=3)
    assert successor.takeover.how == "released"
    assert 2.5 < successor.absence_needs_wait(in_doubt(successor.fence + 1)) <= 3


def test_a_tool_can_check_its_lease_and_read_the_fencing_token(store: Store, tmp_path: Path) -> None:
    seen: list[int] = []

    @tool(effect="side_effect")
    def transfer(cents: int, *, call: ToolCall) -> str:
        """Move money."""
        lease = current_lease()
        lease.check()
        seen.append(lease.fence)
        return "moved"

    script: list[dict[str, Any]] = [
        {"content": [{"type": "tool_use", "id": "t1", "name": "transfer", "input": {"cents": 1}}], "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]
    Agent(ScriptedModel(script), [transfer], store).run("move money", run_id=RUN)
    head = store.backend.read_head(RUN)
    assert head is not None and seen == [head.fence]
    with pytest.raises(LeaseLost, match="outside a tool"):
        current_lease()


def test_ended_owner_names_are_remembered_up_to_a_bound_and_the_forgotten_fall_back_to_the_clock() -> None:
    names = [make_owner() for _ in range(owners._ENDED_KEPT + 10)]
    for name in names:
        owners.mark_ended(name)
    assert len(owners._ended) == owners._ENDED_KEPT  # a long-lived process does not grow without end
    assert owner_is_dead(names[-1])
    assert not owner_is_dead(names[0])  # forgotten: judged on its lease's expiry again (safe)
