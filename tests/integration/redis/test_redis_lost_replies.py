"""A write whose reply is lost (the server applied it, then the connection dropped) is retried
and recognised: never applied twice, never reported as a conflict."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redistest import DurableRedis, ReplyDropper, store_url

from unbroken.codec import Encoder
from unbroken.state import LedgerEntry, RunState, idempotency_key
from unbroken.stores import open_store
from unbroken.stores.backend import RunHead
from unbroken.stores.base import Store


@pytest.fixture
def proxied(durable_redis: DurableRedis) -> Iterator[tuple[Store, ReplyDropper]]:
    dropper = ReplyDropper(durable_redis.port)
    with open_store(store_url(dropper.url, "lost", "none") + "&retry_for=10") as store:
        yield store, dropper
    dropper.close()


def test_a_save_whose_reply_was_lost_is_written_once_and_acknowledged(proxied: tuple[Store, ReplyDropper]) -> None:
    store, dropper = proxied
    state, encoder = RunState(run_id="run-lost", task="t"), Encoder()
    for step in (1, 2):
        state.messages.append({"role": "user", "content": f"m{step}"})
        state.save_seq = step
        encoded = encoder.encode(state, f"save {step}")
        if step == 2:
            dropper.armed.set()
        store.append(encoded, expect_seq=step - 1)
        encoder.committed(state, encoded)

    assert dropper.dropped == 1
    assert [record.seq for record in store.read_records("run-lost")] == [1, 2]
    assert store.load("run-lost").messages == state.messages


def test_a_ledger_claim_whose_reply_was_lost_still_reports_that_it_won(proxied: tuple[Store, ReplyDropper]) -> None:
    store, dropper = proxied
    store.ledger_claim(LedgerEntry("run-claim", idempotency_key("run-claim", "c0"), "c0", "t", "h", "pending"))
    entry = LedgerEntry("run-claim", idempotency_key("run-claim", "c1"), "c1", "t", "h", "pending")

    dropper.armed.set()
    stored, created = store.ledger_claim(entry)

    assert dropper.dropped == 1
    assert (stored, created) == (entry, True)


def test_a_head_swap_whose_reply_was_lost_reports_that_it_swapped(proxied: tuple[Store, ReplyDropper]) -> None:
    store, dropper = proxied
    store.acquire_lease("run-lease", "worker-a", 60)
    head = store.backend.read_head("run-lease")
    assert head is not None
    taken = RunHead(head.seq, head.fence + 1, "worker-b", head.expires_at + 1)

    dropper.armed.set()
    swapped = store.backend.swap_head("run-lease", head, taken)

    assert dropper.dropped == 1
    assert swapped
    assert store.backend.read_head("run-lease") == taken
