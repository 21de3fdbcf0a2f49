"""The object-storage calls the S3 store makes, over boto3: conditional puts, reads in parallel,
listings, deletes, the server's clock, and the check that the service has the conditional
writes the store relies on. Nothing here knows about runs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import boto3  # type: ignore[import-untyped]  # no stubs shipped; its calls are typed Any here
import botocore.config  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]

from ..errors import MissingStoreFeature, StoreUnavailable
from ._s3_clock import ServiceClock

T = TypeVar("T")
PARALLEL_READS = 16


_SESSION: tuple[int, Any] | None = None
_SESSION_LOCK = threading.Lock()
_CHECKED: dict[tuple[str | None, str], ServiceClock] = {}  # per endpoint and bucket
"""(endpoint, bucket) -> the service's clock offset, for the buckets already proven to have
conditional writes in this process."""


def _session() -> Any:
    """One boto3 session per process: it loads the S3 service description once (~0.2 s)."""
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None or _SESSION[0] != os.getpid():
            _SESSION = (os.getpid(), boto3.session.Session())
        return _SESSION[1]


class PreconditionFailed(Exception):
    """A conditional put found the object not as required (HTTP 412, or 409 on a racing create)."""


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class Bucket:
    """One bucket and key prefix, reached through one boto3 client (recreated after a fork)."""

    def __init__(self, bucket: str, prefix: str, *, endpoint: str | None, region: str | None, where: str) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint
        self.region = region
        self.where = where
        self._lock = threading.Lock()
        self._pid = -1
        self._client: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self.service_clock = ServiceClock()  # replaced by the one shared per endpoint and bucket

    # ------------------------------------------------------------------ plumbing

    def client(self) -> Any:
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not share the parent's sockets
                config = botocore.config.Config(
                    retries={"mode": "standard", "max_attempts": 6},
                    connect_timeout=5,
                    read_timeout=30,
                    max_pool_connections=PARALLEL_READS + 4,
                    s3={"addressing_style": "path"} if self.endpoint else {},
                )
                self._client = _session().client(
                    "s3", endpoint_url=self.endpoint, region_name=self.region, config=config
                )
                self.service_clock.watch(self._client)  # every response's Date keeps the clock true
                self._pool = None
                self._pid = os.getpid()
            return self._client

    def _executor(self) -> ThreadPoolExecutor:
        self.client()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PARALLEL_READS, thread_name_prefix="unbroken-s3")
            return self._pool

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def _fail(self, doing: str, exc: Exception) -> StoreUnavailable:
        if isinstance(exc, botocore.exceptions.ClientError) and _code(exc) == "NoSuchBucket":
            return StoreUnavailable(f"bucket {self.bucket!r} does not exist at {self.where}; create it first")
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return StoreUnavailable(
                f"no AWS credentials for {self.where}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
            )
        return StoreUnavailable(f"S3 at {self.where}: {doing} failed: {exc}")

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None and self._pid == os.getpid():
                pool.shutdown(wait=False)

    # ------------------------------------------------------------------ objects

    def get(self, name: str) -> tuple[bytes, str] | None:
        """(body, ETag) of the object, or None when it does not exist."""
        try:
            reply = self.client().get_object(Bucket=self.bucket, Key=self.key(name))
            return reply["Body"].read(), reply["ETag"]
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise self._fail(f"reading {name}", exc) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail(f"reading {name}", exc) from exc

    def get_range(self, name: str, start: int, end: int) -> bytes | None:
        """Bytes ``start`` to ``end`` (inclusive) of the object (fewer at its end; empty when
        ``start`` is past it), or None when it does not exist. One ranged GET."""
        try:
            reply = self.client().get_object(Bucket=self.bucket, Key=self.key(name), Range=f"bytes={start}-{end}")
            return bytes(reply["Body"].read())
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            if _code(exc) == "InvalidRange" or _status(exc) == 416:
                return b""
            raise self._fail(f"reading {name}", exc) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail(f"reading {name}", exc) from exc

    def put(self, name: str, body: bytes, *, if_match: str | None = None, create_only: bool = False) -> str:
        """Write the object and return its new ETag. ``create_only``: only if no object has the
        name (If-None-Match: *); ``if_match``: only if its ETag is still this one. Either
        condition failing raises ``PreconditionFailed``, having written nothing."""
        conditions: dict[str, str] = {}
        if create_only:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        try:
            reply = self.client().put_object(Bucket=self.bucket, Key=self.key(name), Body=body, **conditions)
            return str(reply["ETag"])
        except botocore.exceptions.ClientError as exc:
            # 412: the condition does not hold; 409: a concurrent conditional write won; a
            # conditional put on a missing object answers 404 on some services.
            if conditions and (_status(exc) in (409, 412) or _code(exc) in ("NoSuchKey", "ConditionalRequestConflict")):
                raise PreconditionFailed(name) from exc
            raise self._fail(f"writing {name}", exc) from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail(f"writing {name}", exc) from exc

    def names(self, under: str, *, delimiter: str | None = None) -> list[str]:
        """Names (without the store prefix) of the objects under ``under``, or with a
        ``delimiter``, the sub-folders directly under it."""
        found: list[str] = []
        options: dict[str, str] = {"Bucket": self.bucket, "Prefix": self.key(under)}
        if delimiter:
            options["Delimiter"] = delimiter
        try:
            for page in self.client().get_paginator("list_objects_v2").paginate(**options):
                if delimiter:
                    found += [item["Prefix"][len(self.prefix) :] for item in page.get("CommonPrefixes", [])]
                else:
                    found += [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail(f"listing {under}", exc) from exc
        return found

    def names_after(self, under: str, start_after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` (at most 1,000) names under ``under`` that sort after ``start_after``
        (None: from the first), in key order: one ListObjectsV2 request (StartAfter, MaxKeys)."""
        options: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self.key(under),
            "MaxKeys": max(1, min(limit, 1000)),
        }
        if start_after is not None:
            options["StartAfter"] = self.key(start_after)
        try:
            page = self.client().list_objects_v2(**options)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail(f"listing {under}", exc) from exc
        return [item["Key"][len(self.prefix) :] for item in page.get("Contents", [])][: max(limit, 0)]

    def delete(self, names: Sequence[str]) -> None:
        """Delete the objects (missing ones are fine), up to 1,000 per request."""
        for start in range(0, len(names), 1000):
            batch = [{"Key": self.key(name)} for name in names[start : start + 1000]]
            try:
                self.client().delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                raise self._fail("deleting objects", exc) from exc

    def parallel(self, work: Callable[[T], Any], items: Iterable[T]) -> list[Any]:
        """``[work(item) for item in items]``, up to ``PARALLEL_READS`` at a time, in order."""
        items = list(items)
        if len(items) <= 1:
            return [work(item) for item in items]
        return list(self._executor().map(work, items))

    # ------------------------------------------------------------------ clock and capabilities

    def now(self) -> float:
        """Now on the storage service's clock, from the ``Date`` of its latest responses (to within
        about a second; see ``_s3_clock``): no step of this machine's wall clock moves it."""
        return self.service_clock.now()

    def check_conditional_writes(self) -> None:
        """Prove on a scratch object that the service honours If-None-Match: * and If-Match on
        PutObject (raise ``MissingStoreFeature`` naming the one it lacks); its responses give the
        service's clock a first reading. Done once per process for each endpoint and bucket,
        whose buckets then share one clock, kept true by every later response."""
        place = (self.endpoint, self.bucket)
        with _SESSION_LOCK:
            known = _CHECKED.get(place)
        if known is not None:
            self._share_clock(known)
            return
        self._check_conditional_writes()
        with _SESSION_LOCK:
            _CHECKED.setdefault(place, self.service_clock)

    def _share_clock(self, shared: ServiceClock) -> None:
        with self._lock:
            self.service_clock = shared
            if self._client is not None:
                shared.watch(self._client)

    def _check_conditional_writes(self) -> None:
        # Three puts on one small scratch object (left in place for the next open): a plain put,
        # then two that must be refused. Their Date headers give the service's clock.
        name = ".unbroken-probe"
        client = self.client()
        try:
            etag = client.put_object(Bucket=self.bucket, Key=self.key(name), Body=b"probe")["ETag"]
            create_only = "create-only writes (PutObject with If-None-Match: *)"
            self._expect_refusal(name, {"IfNoneMatch": "*"}, create_only)
            wrong = '"00000000000000000000000000000000"' if etag != '"00000000000000000000000000000000"' else '"1"'
            compare_and_set = "compare-and-set writes (PutObject with If-Match: ETag)"
            self._expect_refusal(name, {"IfMatch": wrong}, compare_and_set)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            if isinstance(exc, botocore.exceptions.ClientError) and _status(exc) in (400, 501):
                raise MissingStoreFeature(
                    f"S3 at {self.where} refused a conditional PutObject ({_code(exc)}): this store needs "
                    "create-only writes (If-None-Match: *) and compare-and-set writes (If-Match); see docs/s3.md "
                    "for services that have them"
                ) from exc
            raise self._fail("checking conditional writes", exc) from exc

    def _expect_refusal(self, name: str, condition: dict[str, str], feature: str) -> dict[str, Any]:
        """Put with ``condition``, which must be refused; returns the refusal's response."""
        try:
            self.client().put_object(Bucket=self.bucket, Key=self.key(name), Body=b"probe", **condition)
        except botocore.exceptions.ClientError as exc:
            if _status(exc) in (409, 412):
                return dict(exc.response)
            raise
        raise MissingStoreFeature(
            f"S3 at {self.where} ignores {feature}: it overwrote an object the condition should have "
            "protected, so two workers could overwrite each other's saves. Use a service that has it "
            "(see docs/s3.md)"
        )
