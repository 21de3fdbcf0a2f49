"""The fault-injecting backend: each simulated process reaches the shared store's backend through one,
which fails, delays, tears or loses the reply of a primitive call when the schedule armed it,
judges leases on the simulated store service's clock, and journals every acknowledged save."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...codec import EncodedSave
from ...errors import StoreUnavailable
from ...stores.backend import Backend, RunHead, SealedEntry
from .delegate import Delegating

if TYPE_CHECKING:
    from .world import World

T = TypeVar("T")


class FaultyBackend(Delegating):
    """Process ``process``'s connection to the world's store (wrapping its backend)."""

    def __init__(self, world: World, process: int, inner: Backend) -> None:
        super().__init__(inner)
        self.world = world
        self.process = process

    def store_time(self) -> float:
        return self.world.store_now()

    def lease_time(self) -> float:
        return self.world.store_now()  # the world's store is a service: its clock judges leases

    def _faulted(self, primitive: str, call: Callable[[], T], torn: Callable[[], None] | None = None) -> T:
        fault, number = self.world.take_fault(self.process, primitive)
        where = f"simulated fault on {primitive} (process p{self.process})"
        if fault == "error":
            raise StoreUnavailable(f"{where}: the store could not be reached; nothing was written")
        if fault == "torn" and torn is not None:
            torn()
            raise StoreUnavailable(f"{where}: the connection broke half way through the write")
        if fault == "delay":
            self.world.meanwhile(int(number))
        result = call()
        if fault == "delay_after":
            self.world.meanwhile(int(number))
        if fault == "lost_reply":
            raise StoreUnavailable(f"{where}: the store applied the call and its reply was lost")
        return result

    def read_head(self, run_id: str) -> RunHead | None:
        return self._faulted("read_head", lambda: self.inner.read_head(run_id))

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        taking = new.owner is not None and (expected is None or expected.owner != new.owner)
        after = self.world.take_late(self.process) if taking else None
        if after is not None:  # killed with its lease write in flight: the store applies it later
            self.world.kill_in_flight(self.process, after, lambda: self._lands(run_id, expected, new))

        def swap() -> bool:
            done = self.inner.swap_head(run_id, expected, new)
            if done:  # noted as it lands, before any delay of its reply
                self.world.note_head(run_id, new, self.process)
            return done

        return self._faulted("swap_head", swap)

    def _lands(self, run_id: str, expected: RunHead | None, new: RunHead) -> str:
        """The write of a process killed with it in flight reaches the store (still a swap: it
        lands only if the head is still the one it expected)."""
        if self.inner.swap_head(run_id, expected, new):
            self.world.note_head(run_id, new, self.process)
            return f"the lease write of dead p{self.process} landed: {new.owner} holds {run_id}"
        return f"the lease write of dead p{self.process} reached the store and was refused"

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        def write() -> None:
            self.inner.write_record(save, entries, expect_seq=expect_seq, fence=fence)
            self.world.note_save(save, self.process)  # applied; acknowledged unless the reply is lost

        def torn() -> None:
            for sealed in entries:
                self.inner.put_entry(sealed, fence=fence)

        self._faulted("write_record", write, torn)
        self.world.note_acknowledged(save, self.process)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        self.inner.replace_records(run_id, saves, expect_seq=expect_seq, fence=fence)
        self.world.note_rewrite(run_id)

    def records_after(self, run_id: str, after_seq: int = 0) -> list[Any]:
        return self._faulted("records_after", lambda: self.inner.records_after(run_id, after_seq))

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        return self._faulted("insert_entry", lambda: self.inner.insert_entry(sealed, fence=fence))

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        self._faulted("put_entry", lambda: self.inner.put_entry(sealed, fence=fence))

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        return self._faulted("get_entry", lambda: self.inner.get_entry(run_id, key))
