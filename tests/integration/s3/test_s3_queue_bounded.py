"""With 5,000 queued runs on S3, a page of the queue costs a page of requests (issue 23 item 6):
one ListObjectsV2 of the ``order/`` objects (StartAfter, MaxKeys), then a GET per run listed.

The server is moto in this process (``ThreadedMotoServer``) so the bucket can be filled through
moto's own backend in a second; the store reaches it over HTTP as always, and every request it
sends is counted (botocore's ``before-send`` event). Reading the whole queue would be 5,000 GETs
and five LIST pages. A bucket written before the order objects existed gets them at its first
open (the upgrade rule in ``_s3_queue``)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import unquote

import pytest
import s3test

from unbroken import StoreUnavailable, lost, ops
from unbroken.codec import Encoder
from unbroken.state import RunState
from unbroken.stores import _s3_objects, open_store
from unbroken.stores._s3_queue import BUILT, order_name
from unbroken.stores.s3 import S3Store

moto_server = pytest.importorskip("moto.server")
moto_s3 = pytest.importorskip("moto.s3.models")
moto_core = pytest.importorskip("moto.core")

QUEUED = 5_000
PREFIX = "runs/"
T = TypeVar("T")


class Server:
    def __init__(self) -> None:
        s3test.use_test_credentials()
        self.port = s3test.free_port()
        self.moto = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.moto.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def put(self, bucket: str, name: str, body: bytes) -> None:
        """Straight into moto's backend: no HTTP, so 10,000 objects take about a second."""
        moto_s3.s3_backends[moto_core.DEFAULT_ACCOUNT_ID]["aws"].put_object(bucket, PREFIX + name, body)


def queue(server: Server, bucket: str, count: int, *, with_order: bool = True) -> None:
    """``count`` submissions ``q-00000``... one second apart, as ``add_submission`` writes them."""
    for n in range(count):
        run_id, at = f"q-{n:05d}", 1_000.0 + n
        body = json.dumps({"task": f"task {n}", "agent": "a", "submitted_at": at}).encode()
        server.put(bucket, f"queue/{run_id}", body)
        if with_order:
            server.put(bucket, order_name(at, run_id), b"")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    yield started
    started.moto.stop()


@pytest.fixture(scope="module")
def crowded(server: Server) -> Iterator[S3Store]:
    bucket = s3test.new_bucket(server.url)
    with open_store(s3test.store_url(server.url, bucket)) as store:  # an empty bucket: marked built
        assert isinstance(store, S3Store)
        queue(server, bucket, QUEUED)
        yield store


def requests(store: S3Store, action: Callable[[], T]) -> tuple[T, list[str]]:
    """What ``action`` returned and the requests the store sent: ``GET queue/q-00001`` (method
    and name under the store's prefix), ``LIST order/`` for a listing."""
    sent: list[str] = []

    def count(request: Any, **_: Any) -> None:
        path, _, query = request.url.partition("?")
        key = unquote(path.split("/", 4)[-1]) if path.count("/") >= 4 else ""
        if not key and "list-type" in query:
            prefix = unquote(query.split("prefix=", 1)[1].split("&", 1)[0])
            sent.append(f"LIST {prefix.removeprefix(store.backend.objects.prefix)}")
        else:
            sent.append(f"{request.method} {key.removeprefix(store.backend.objects.prefix)}")

    events = store.backend.objects.client().meta.events  # a client copies its session's hooks when made
    events.register("before-send.s3", count)
    try:
        return action(), sent
    finally:
        events.unregister("before-send.s3", count)


@pytest.mark.slow  # filling 5,000 runs and moto's own listing of them take seconds
def test_the_first_page_of_runs_is_one_list_and_a_page_of_gets(crowded: S3Store) -> None:
    page, sent = requests(crowded, lambda: ops.runs_page(crowded, limit=50))

    assert [run.run_id for run in page.queued] == [f"q-{n:05d}" for n in range(50)]
    assert page.queued_next == (1_049.0, "q-00049")
    # the runs listing (one LIST of runs/), the queue page (one LIST of order/), then a
    # submission and a head per run listed (51 + 51): the head that chose the row marks it parked
    assert sorted(line for line in sent if line.startswith("LIST")) == ["LIST order/", "LIST runs/"]
    assert len(sent) == 2 + 51 + 51, sent[:20]


@pytest.mark.slow  # filling 5,000 runs and moto's own listing of them take seconds
def test_the_next_page_starts_after_the_cursor(crowded: S3Store) -> None:
    page, sent = requests(crowded, lambda: ops.queued_page(crowded, limit=50, after=(4_000.0, "q-03000")))

    assert [run.run_id for run in page.runs][:2] == ["q-03001", "q-03002"] and len(page.runs) == 50
    assert len(sent) == 1 + 51 + 51


@pytest.mark.slow  # filling 5,000 runs and moto's own listing of them take seconds
def test_show_of_a_queued_run_reads_that_run(crowded: S3Store) -> None:
    found, sent = requests(crowded, lambda: ops.queued_run(crowded, "q-04999"))

    assert found is not None and found.task == "task 4999"
    assert len(sent) <= 6, sent


@pytest.mark.slow  # filling 5,000 runs and moto's own listing of them take seconds
def test_a_claim_reads_the_head_of_the_queue(crowded: S3Store) -> None:
    claimed, sent = requests(crowded, lambda: crowded.claim_runnable("worker-a", 60.0, agent="a", limit=2))

    assert [run.run_id for run in claimed] == ["q-00000", "q-00001"]
    assert len(sent) < 2 * 64 + 10, len(sent)  # one page: a GET per submission listed, a few heads
    for run in claimed:
        crowded.release_lease(run.lease)


def test_a_bucket_from_before_the_order_objects_gets_them_at_its_first_open(server: Server) -> None:
    bucket = s3test.new_bucket(server.url)
    queue(server, bucket, 30, with_order=False)  # as an earlier version left it

    with open_store(s3test.store_url(server.url, bucket)) as store:
        page = ops.queued_page(store, limit=10)
        sent: list[str] = []
        hook = _s3_objects._session().events  # registered before the next store makes its client
        counter = lambda request, **_: sent.append(f"{request.method} {request.url.split('?')[0]} {request.url}")  # noqa: E731
        hook.register("before-send.s3", counter)
        try:
            open_store(s3test.store_url(server.url, bucket)).close()
        finally:
            hook.unregister("before-send.s3", counter)

    assert [run.run_id for run in page.runs] == [f"q-{n:05d}" for n in range(10)]
    assert any(BUILT in line for line in sent)  # checked again...
    assert not any("list-type" in line and "queue" in line for line in sent)  # ...not rebuilt


def test_a_duplicate_submit_leaves_one_order_object(server: Server) -> None:
    bucket = s3test.new_bucket(server.url)
    with open_store(s3test.store_url(server.url, bucket)) as store:
        assert isinstance(store, S3Store)
        store.submit("the task", "r1")
        store.submit("the task", "r1")

        names = store.backend.objects.names("order/")

    assert len(names) == 1 and names[0].endswith("-r1")


def small_queue(store: S3Store, count: int) -> None:
    for n in range(count):
        store.submit(f"task {n}", f"q-{n:05d}")


def test_a_queue_page_reads_each_run_s_submission_and_head_once(s3_url: str) -> None:
    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        small_queue(store, 12)
        page, sent = requests(store, lambda: ops.queued_page(store, limit=5))

    assert [run.run_id for run in page.runs] == [f"q-{n:05d}" for n in range(5)]
    run_ids = [f"q-{n:05d}" for n in range(6)]  # the page and one more: are there more?
    expected = ["LIST order/", *(f"GET queue/{r}" for r in run_ids), *(f"GET runs/{r}/head" for r in run_ids)]
    assert Counter(sent) == Counter(expected), sent


def test_a_page_s_reads_are_sent_from_the_store_s_bounded_pool(s3_url: str) -> None:
    threads: list[str] = []
    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        small_queue(store, 40)
        record = lambda request, **_: threads.append(threading.current_thread().name)  # noqa: E731
        events = store.backend.objects.client().meta.events
        events.register("before-send.s3", record)
        try:
            ops.queued_page(store, limit=30)
        finally:
            events.unregister("before-send.s3", record)

    assert len(threads) == 1 + 31 + 31
    readers = set(threads[1:])  # after the listing, every GET from the pool, not this thread
    assert all(name.startswith("unbroken-s3") for name in readers), readers
    assert 1 < len(readers) <= _s3_objects.PARALLEL_READS


def test_a_started_run_is_left_out_and_a_parked_one_is_marked_lost(s3_url: str) -> None:
    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        small_queue(store, 4)
        store.append(Encoder().encode(RunState(run_id="q-00001", task="task 1", save_seq=1), "start"), expect_seq=0)
        assert lost.park(store, "q-00002")

        page = ops.queued_page(store, limit=10)

    assert [(run.run_id, run.phase) for run in page.runs] == [
        ("q-00000", "queued"),
        ("q-00002", lost.LOST_PHASE),
        ("q-00003", "queued"),
    ]


def test_order_objects_left_by_a_crashed_submit_are_skipped_in_order(s3_url: str) -> None:
    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        small_queue(store, 3)
        queued = store.backend.submission("q-00001")
        assert queued is not None
        store.backend.objects.put(order_name(queued.submitted_at - 0.5, "q-00001"), b"")  # names another time
        store.backend.objects.put(order_name(queued.submitted_at, "q-gone"), b"")  # no submission behind it

        page = ops.queued_page(store, limit=10)
        left = store.backend.objects.names("order/")

    assert [run.run_id for run in page.runs] == ["q-00000", "q-00001", "q-00002"]
    assert len(left) == 5  # skipped, never deleted: a submit may be between its two writes


def test_a_failing_read_in_a_page_is_store_unavailable_naming_the_object(s3_url: str) -> None:
    import botocore.awsrequest  # type: ignore[import-untyped]  # no stubs shipped

    with open_store(s3_url) as store:
        assert isinstance(store, S3Store)
        small_queue(store, 6)

        def refuse(request: Any, **_: Any) -> Any:
            if request.url.endswith("/runs/q-00003/head"):
                raw = botocore.awsrequest.AWSResponse(request.url, 403, {}, None)
                raw.raw = _Body(b"<Error><Code>AccessDenied</Code><Message>no</Message></Error>")
                return raw
            return None

        events = store.backend.objects.client().meta.events
        events.register("before-send.s3", refuse)
        try:
            with pytest.raises(StoreUnavailable, match="q-00003/head"):
                ops.queued_page(store, limit=10)
        finally:
            events.unregister("before-send.s3", refuse)


class _Body:
    """A response body for a request answered in ``before-send`` (botocore reads ``stream``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data
