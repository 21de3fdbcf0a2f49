"""How the S3 store lays a run out, and what it refuses: records packed into few segments, old
objects removed, a stale writer refused at the head, a service without conditional writes
refused at open."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from s3test import endpoint, new_bucket, store_url

from unbroken.codec import Encoder
from unbroken.errors import ConcurrentSave, CorruptCheckpoint, LeaseLost, MissingStoreFeature
from unbroken.state import RunState
from unbroken.stores import open_store, s3
from unbroken.stores.s3 import S3Store


def save_many(store: S3Store, run_id: str, count: int) -> RunState:
    state = RunState(run_id=run_id, task="layout")
    encoder = Encoder()
    for step in range(1, count + 1):
        state.messages.append({"role": "user", "content": f"message {step}"})
        state.save_seq = step
        encoded = encoder.encode(state, f"save {step}")
        store.append(encoded, expect_seq=step - 1)
        encoder.committed(state, encoded)
    return state


@pytest.fixture
def store(s3_url: str) -> Iterator[S3Store]:
    with open_store(s3_url) as opened:
        assert isinstance(opened, S3Store)
        yield opened


def test_records_are_packed_into_doubling_segments_and_superseded_objects_are_deleted(
    store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3, "PACK_EVERY", 4)  # the real 64 works the same, 16 times slower to show
    state = save_many(store, "run-packed", 7 * 4 + 3)

    head = store.backend._fetch_head("run-packed")
    assert head is not None
    assert [(first, last) for first, last, _ in head[0]["segments"]] == [(1, 16), (17, 24), (25, 28)]
    assert len(head[0]["tail"]) == 3
    names = store.backend.objects.names("runs/run-packed/")
    assert len([n for n in names if "/seg/" in n]) == 3 and len([n for n in names if "/rec/" in n]) == 3
    assert store.load("run-packed").messages == state.messages


def test_segments_stop_merging_at_max_segment(store: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "PACK_EVERY", 2)
    monkeypatch.setattr(s3, "MAX_SEGMENT", 4)
    save_many(store, "run-capped", 12)

    head = store.backend._fetch_head("run-capped")
    assert head is not None
    assert [(first, last) for first, last, _ in head[0]["segments"]] == [(1, 4), (5, 8), (9, 12)]


def test_a_writer_whose_lease_was_taken_over_is_refused_at_the_head(store: S3Store) -> None:
    stale = store.acquire_lease("run-fenced", "worker-a", 60)
    state = RunState(run_id="run-fenced", task="t", save_seq=1)
    store.append(Encoder().encode(state, "start"), expect_seq=0, fence=stale.fence)
    store.acquire_lease("run-fenced", "worker-b", 60, takeover_from="worker-a")
    state.save_seq = 2

    with pytest.raises(LeaseLost):
        store.append(Encoder().encode(state, "late"), expect_seq=1, fence=stale.fence)

    assert [r.seq for r in store.read_records("run-fenced")] == [1]


def test_two_writers_of_the_same_position_one_wins_the_other_is_told_to_reload(s3_url: str) -> None:
    with open_store(s3_url) as first, open_store(s3_url) as second:
        state = RunState(run_id="run-race", task="t", save_seq=1)
        first.append(Encoder().encode(state, "start"), expect_seq=0)
        second.read_records("run-race")  # both have now seen the head at save 1
        state.save_seq = 2
        first.append(Encoder().encode(state, "mine"), expect_seq=1)

        with pytest.raises(ConcurrentSave):
            second.append(Encoder().encode(state, "theirs"), expect_seq=1)

        assert [r.seq for r in first.read_records("run-race")] == [1, 2]


class HeaderDroppingProxy:
    """An HTTP proxy to the test S3 server that drops one request header, as a service that
    ignores it would."""

    def __init__(self, upstream: str, dropped: str) -> None:
        target = urlsplit(upstream)
        host, port = target.hostname or "127.0.0.1", target.port or 80

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() != dropped.lower()}
                conn = http.client.HTTPConnection(host, port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(("dropped", "named"), [("If-None-Match", "If-None-Match: *"), ("If-Match", "If-Match: ETag")])
def test_a_service_that_ignores_a_conditional_header_is_refused_at_open_naming_it(dropped: str, named: str) -> None:
    server = endpoint()
    bucket = new_bucket(server)
    proxy = HeaderDroppingProxy(server, dropped)
    try:
        with pytest.raises(MissingStoreFeature) as refused:
            open_store(store_url(proxy.url, bucket))
    finally:
        proxy.close()

    assert named in str(refused.value)


def test_a_damaged_record_is_never_packed_away_nor_deleted(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3, "PACK_EVERY", 4)
    with open_store(s3_url) as first:
        assert isinstance(first, S3Store)
        state = save_many(first, "run-damaged", 3)
    store = open_store(s3_url)  # a later process: it knows the records only from the bucket
    assert isinstance(store, S3Store)
    (name,) = [n for n in store.backend.objects.names("runs/run-damaged/rec/") if "/000000000002-" in n]
    body, _ = store.backend.objects.get(name) or (b"", "")
    store.backend.objects.put(name, body.replace(b"message 2", b"message X"))
    encoder = Encoder()
    encoder.prime(state)
    for step in (4, 5):  # the fourth save would pack the tail; the damage keeps it loose
        state.messages.append({"role": "user", "content": f"message {step}"})
        state.save_seq = step
        encoded = encoder.encode(state, f"save {step}")
        store.append(encoded, expect_seq=step - 1)
        encoder.committed(state, encoded)

    head = store.backend._fetch_head("run-damaged")
    assert head is not None and head[0]["segments"] == [] and len(head[0]["tail"]) == 5
    assert store.backend.objects.get(name) is not None
    with pytest.raises(CorruptCheckpoint) as damaged:
        store.load("run-damaged")
    assert damaged.value.last_good_seq == 1
    store.close()
