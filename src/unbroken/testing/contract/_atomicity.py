"""The contract on the atomicity rules A1-A7 of ``unbroken.stores.backend``, tested through
racing threads and a second store opened on the same place (never by reading the backend's code)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar, get_args

import pytest

from ... import clock
from ...codec import Encoder
from ...errors import ConcurrentSave, LeaseHeld
from ...state import idempotency_key
from ...stores import open_store
from ...stores.backend import CAPABILITIES, Durability, RunHead
from ...stores.base import Store
from ._base import ContractBase
from ._support import LONG_TTL, RunWriter, ledger_entry

T = TypeVar("T")


def _race(workers: int, work: Callable[[int], T]) -> tuple[list[T], list[BaseException]]:
    """Run ``work(n)`` in ``workers`` threads started together; their results and their errors."""
    barrier = threading.Barrier(workers)
    results: list[T] = []
    errors: list[BaseException] = []
    guard = threading.Lock()

    def run(worker: int) -> None:
        try:
            barrier.wait()
            outcome = work(worker)
        except BaseException as exc:  # collected: the test decides which errors are expected
            with guard:
                errors.append(exc)
            return
        with guard:
            results.append(outcome)

    threads = [threading.Thread(target=run, args=(worker,)) for worker in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results, errors


class AtomicityContract(ContractBase):
    """Conditional writes are all-or-nothing, the head moves by compare-and-set, one clock."""

    def reopen(self, store: Store) -> Store:
        """A second store on the same place as ``store`` (another process would open this)."""
        return open_store(store.url)

    # ------------------------------------------------------------------ A1

    def test_of_writers_racing_for_one_position_exactly_one_succeeds_and_losers_write_nothing(
        self, store: Store
    ) -> None:
        RunWriter(store, "run-a1").turn(1)
        rivals = []
        for n in range(6):
            rival = RunWriter(store, "run-a1")
            rival.state = store.load("run-a1")
            rival.encoder.prime(rival.state)
            rival.state.messages.append({"role": "user", "content": f"rival {n}"})
            rivals.append(rival)

        def save(n: int) -> int:
            rivals[n].save(ledger=[ledger_entry("run-a1", f"call_rival_{n}")])
            return n

        won, lost = _race(6, save)

        assert len(won) == 1 and len(lost) == 5
        assert all(isinstance(exc, ConcurrentSave) for exc in lost)
        winner = won[0]
        assert store.load("run-a1").messages[-1] == {"role": "user", "content": f"rival {winner}"}
        for n in range(6):
            stored = store.ledger_get("run-a1", idempotency_key("run-a1", f"call_rival_{n}"))
            assert (stored is not None) == (n == winner)

    # ------------------------------------------------------------------ A2

    def test_a_reader_never_sees_a_record_before_its_ledger_entries(self, store: Store) -> None:
        writer = RunWriter(store, "run-a2")
        done = threading.Event()
        early: list[int] = []

        def read() -> None:
            while not done.is_set():
                for record in store.records_since("run-a2", 0):
                    if store.ledger_get("run-a2", idempotency_key("run-a2", f"call_{record.seq}")) is None:
                        early.append(record.seq)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for seq in range(1, 13):
                writer.state.turns = seq
                writer.save(ledger=[ledger_entry("run-a2", f"call_{seq}")])
        finally:
            done.set()
            reader.join(timeout=60)

        assert early == []

    # ------------------------------------------------------------------ A3

    def test_readers_see_the_whole_old_or_the_whole_new_records_during_a_rewrite(self, store: Store) -> None:
        run = RunWriter(store, "run-a3")
        for step in range(1, 7):
            run.turn(step)
        state = store.load("run-a3")
        state.save_seq = 7
        encoder = Encoder()
        first = encoder.encode(state, "compacted", force_snapshot=True)
        encoder.committed(state, first)
        state.turns += 1
        state.save_seq = 8
        second = encoder.encode(state, "compacted")
        seen: list[list[int]] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                seen.append([record.seq for record in store.records_since("run-a3", 0)])

        reader = threading.Thread(target=read)
        reader.start()
        try:
            time.sleep(0.05)
            store.rewrite("run-a3", [first, second], expect_seq=6)
            time.sleep(0.05)
        finally:
            done.set()
            reader.join(timeout=60)

        assert seen and all(seqs in ([1, 2, 3, 4, 5, 6], [7, 8]) for seqs in seen)
        assert seen[-1] == [7, 8]
        head = store.head_of("run-a3")
        assert head is not None and head.seq == 8
        assert store.load("run-a3").turns == state.turns

    # ------------------------------------------------------------------ A4

    def test_swap_head_with_a_stale_expected_head_writes_nothing(self, store: Store) -> None:
        store.acquire_lease("run-a4", "worker-a", LONG_TTL)
        stale = store.head_of("run-a4")
        store.acquire_lease("run-a4", "worker-a", LONG_TTL)
        current = store.head_of("run-a4")
        assert stale is not None and current is not None

        swapped = store.backend.swap_head("run-a4", stale, RunHead(stale.seq, stale.fence + 1, "worker-b", 0.0))

        assert swapped is False
        assert store.head_of("run-a4") == current

    def test_swap_head_expecting_no_head_creates_it_once(self, store: Store) -> None:
        new = RunHead(0, 1, "worker-a", store.lease_now() + LONG_TTL)

        assert store.backend.swap_head("run-a4-new", None, new) is True
        assert store.backend.swap_head("run-a4-new", None, RunHead(0, 1, "worker-b", 0.0)) is False
        assert store.head_of("run-a4-new") == new

    def test_of_swaps_racing_from_one_expected_head_exactly_one_succeeds(self, store: Store) -> None:
        store.acquire_lease("run-a4-race", "worker-a", LONG_TTL)
        expected = store.head_of("run-a4-race")
        assert expected is not None
        news = [RunHead(expected.seq, expected.fence + 1, f"worker-{n}", expected.expires_at) for n in range(8)]

        results, errors = _race(8, lambda n: (n, store.backend.swap_head("run-a4-race", expected, news[n])))

        assert errors == []
        winners = [n for n, swapped in results if swapped]
        assert len(winners) == 1
        assert store.head_of("run-a4-race") == news[winners[0]]

    def test_of_owners_racing_for_a_free_lease_exactly_one_gets_it(self, store: Store) -> None:
        results, errors = _race(8, lambda n: store.acquire_lease("run-a4-lease", f"worker-{n}", LONG_TTL))

        assert len(results) == 1
        assert len(errors) == 7 and all(isinstance(exc, LeaseHeld) for exc in errors)
        held = store.lease_of("run-a4-lease")
        assert held is not None and held == results[0]

    # ------------------------------------------------------------------ A6

    def test_store_time_is_a_unix_time_that_never_goes_backwards(self, store: Store) -> None:
        readings = [store.store_now() for _ in range(5)]

        assert abs(readings[0] - time.time()) < 300  # the store's clock, not another epoch or unit
        assert readings == sorted(readings)

    def test_the_lease_clock_never_goes_backwards(self, store: Store) -> None:
        readings = [store.lease_now() for _ in range(5)]

        assert readings == sorted(readings)

    def test_leases_are_judged_on_the_store_lease_clock(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        before = store.lease_now()
        lease = store.acquire_lease("run-a6", "worker-a", LONG_TTL)
        after = store.lease_now()
        assert before + LONG_TTL - 2.0 <= lease.expires_at <= after + LONG_TTL + 2.0

        real = store.backend.lease_time
        monkeypatch.setattr(store.backend, "lease_time", lambda: real() + 2 * LONG_TTL)  # the lease clock moves on

        assert store.lease_of("run-a6") is None
        assert store.acquire_lease("run-a6", "worker-b", LONG_TTL).fence > lease.fence

    def test_a_step_of_this_machines_wall_clock_does_not_move_the_lease_clock(self, store: Store) -> None:
        lease = store.acquire_lease("run-a6-step", "worker-a", LONG_TTL)

        with clock.using(_WallStepped(2 * LONG_TTL)):  # NTP, a VM resume: the wall clock jumps ahead
            held = store.lease_of("run-a6-step")
            with pytest.raises(LeaseHeld):
                store.acquire_lease("run-a6-step", "worker-b", LONG_TTL)

        assert held == lease

    def test_a_lease_written_in_an_earlier_boot_is_expired(self, store: Store) -> None:
        if "multi_host" in store.capabilities:
            return  # a server's clock: a reboot of this machine changes nothing
        lease = store.acquire_lease("run-a6-boot", "worker-a", LONG_TTL)

        with clock.using(_Rebooted()):  # every holder of the earlier boot is dead
            assert store.lease_of("run-a6-boot") is None
            assert store.acquire_lease("run-a6-boot", "worker-b", LONG_TTL).fence > lease.fence

    # ------------------------------------------------------------------ A7

    def test_the_store_declares_known_capabilities_and_durability(self, store: Store) -> None:
        assert store.capabilities <= CAPABILITIES
        assert store.durability in get_args(Durability)

    def test_what_a_write_acknowledged_is_there_for_a_second_store_on_the_same_place(self, store: Store) -> None:
        lease = store.acquire_lease("run-a7", "worker-a", LONG_TTL)
        RunWriter(store, "run-a7").save(fence=lease.fence, ledger=[ledger_entry("run-a7")])
        if store.durability == "memory":  # declared: nothing outlives the store object
            assert store.load("run-a7").save_seq == 1
            return
        second = self.reopen(store)
        try:
            assert second.load("run-a7").save_seq == 1
            assert second.ledger_get("run-a7", ledger_entry("run-a7").key) == ledger_entry("run-a7")
            assert second.lease_of("run-a7") == lease
        finally:
            second.close()


class _WallStepped(clock.SystemClock):
    """The machine's clocks with the wall clock ``ahead`` seconds ahead (its other clocks true)."""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def wall(self) -> float:
        return super().wall() + self.ahead


class _Rebooted(clock.SystemClock):
    """The machine's clocks after a reboot: another boot id, a boot clock started again."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def boot(self) -> tuple[str, float]:
        return "rebooted-0123456789abcdef", 1.0 + time.monotonic() - self.started
