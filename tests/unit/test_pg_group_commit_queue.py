"""The group-commit queue alone (no server): who leads, what a batch holds, who waits."""

from __future__ import annotations

import threading
import time

import pytest

from unbroken.stores._pg_group_commit import GroupCommit, Pending


def pending(run_id: str) -> Pending:
    return Pending(run_id, b"stmt", {}, None, None)


def answer(batch: list[Pending]) -> None:
    for item in batch:
        item.written = item.done = True


def test_a_save_alone_is_sent_at_once_in_a_batch_of_its_own() -> None:
    sent: list[list[str]] = []

    def send(batch: list[Pending]) -> None:
        sent.append([p.key for p in batch])
        answer(batch)

    group = GroupCommit(send, width=1)
    for run_id in ("a", "b", "a"):
        item = pending(run_id)
        group.submit(item)
        assert item.done and item.written
    assert sent == [["a"], ["b"], ["a"]]


def submit_all(group: GroupCommit, items: list[Pending]) -> list[threading.Thread]:
    threads = [threading.Thread(target=group.submit, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return threads


def test_saves_arriving_while_every_connection_is_busy_go_in_one_batch_one_per_run_sorted() -> None:
    release = threading.Event()
    sent: list[list[str]] = []

    def send(batch: list[Pending]) -> None:
        sent.append([p.key for p in batch])
        if len(sent) == 1:
            release.wait(5)
        answer(batch)

    group = GroupCommit(send, width=1)
    first = submit_all(group, [pending("z")])
    while not sent:
        time.sleep(0.001)
    later = [pending(run_id) for run_id in ("c", "a", "b", "a")]
    threads = submit_all(group, later)
    while len(group._queue) < len(later):
        time.sleep(0.001)
    release.set()
    for thread in [*first, *threads]:
        thread.join(5)
    # the second save of run a depends on the first: it waits for the next batch
    assert sent == [["z"], ["a", "b", "c"], ["a"]]
    assert all(item.done for item in later)


def test_a_second_connection_takes_a_save_at_once_instead_of_queueing_it() -> None:
    release = threading.Event()
    sent: list[list[str]] = []

    released: list[bool] = []

    def send(batch: list[Pending]) -> None:
        sent.append([p.key for p in batch])
        if batch[0].key == "slow":
            released.append(release.wait(5))
        answer(batch)

    group = GroupCommit(send, width=2)
    slow = submit_all(group, [pending("slow")])
    while not sent:
        time.sleep(0.001)
    fast = pending("fast")
    group.submit(fast)  # returns while "slow" is still in flight
    assert fast.done and sent == [["slow"], ["fast"]]
    release.set()
    slow[0].join(5)
    assert released == [True]  # "slow" was still in flight when "fast" returned


@pytest.mark.parametrize(
    ("error", "expect_alone"), [(RuntimeError("server said no"), False), (KeyboardInterrupt(), True)]
)
def test_when_the_leaders_send_raises_each_follower_gets_its_own_copy_and_an_interrupt_sends_them_alone(
    error: BaseException, expect_alone: bool
) -> None:
    release = threading.Event()
    calls: list[int] = []

    def send(batch: list[Pending]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            release.wait(5)
            answer(batch)
            return
        raise error

    group = GroupCommit(send, width=1)
    first = submit_all(group, [pending("lead")])
    while not calls:
        time.sleep(0.001)
    followers = [pending(run_id) for run_id in ("x", "y")]
    raised: list[BaseException] = []

    def follow(item: Pending) -> None:
        try:
            group.submit(item)
        except BaseException as exc:  # the leader of the second batch raises the original
            raised.append(exc)

    threads = [threading.Thread(target=follow, args=(item,)) for item in followers]
    for thread in threads:
        thread.start()
    while len(group._queue) < 2:
        time.sleep(0.001)
    release.set()
    for thread in [*first, *threads]:
        thread.join(5)
    assert raised == [error]
    # one of x and y led the failed batch (it raised); the other was its follower
    answered = [item for item in followers if item.error is not None or item.alone is not None]
    assert len(answered) == 1
    other = answered[0]
    if expect_alone:
        assert other.alone is True and other.error is None
    else:
        assert other.error is not error and isinstance(other.error, RuntimeError)
        assert other.error.__cause__ is error


def test_the_width_is_at_least_one() -> None:
    group = GroupCommit(answer, width=0)
    item = pending("a")
    group.submit(item)
    assert item.done


@pytest.mark.parametrize("width", [1, 2, 4])
def test_many_threads_each_get_their_answer_and_no_batch_holds_a_run_twice(width: int) -> None:
    seen: list[list[str]] = []
    lock = threading.Lock()

    def send(batch: list[Pending]) -> None:
        with lock:
            seen.append([p.key for p in batch])
        time.sleep(0.001)
        answer(batch)

    group = GroupCommit(send, width=width)
    items = [pending(f"r{i % 5}") for i in range(60)]
    for thread in submit_all(group, items):
        thread.join(10)
    assert all(item.done and item.written for item in items)
    assert all(len(keys) == len(set(keys)) for keys in seen)
    assert sum(len(keys) for keys in seen) == len(items)
    assert group.batches == len(seen)
