"""``redis://HOST:PORT/DB``: runs kept in a Redis server, shared by workers on many machines.

URL options (the rest of the URL, password and ``rediss://`` for TLS included, goes to redis-py):

* ``durability=full|normal|none`` (default ``full``): what the server must guarantee, checked at
  open against its own settings (``CONFIG GET appendonly appendfsync``). ``full`` needs the
  append-only file synced on every write (``appendonly yes``, ``appendfsync always``): an
  acknowledged save survives a crash of the server or its machine. ``normal`` needs
  ``appendonly yes`` with ``appendfsync everysec`` (or ``always``): a server crash loses nothing,
  a power loss up to about a second. ``none`` accepts any server (a server that keeps nothing on
  disk loses every run when it restarts). A server that does less than asked is refused with
  ``InsufficientDurability`` saying what to set; the store never claims more than the server gives.
  At every level the server must not evict run keys: ``maxmemory-policy`` ``noeviction`` (the
  default) or ``volatile-*`` (unbroken sets no TTL); ``allkeys-*`` (a Redis shared with a cache)
  is refused. The settings are read again at every lease acquisition (``CONFIG SET`` changes
  them live), so a run never starts on a server that stopped keeping what it was promised.
* ``assume_noeviction=yes``: for a managed Redis that answers neither ``CONFIG GET`` nor
  ``INFO memory``: the operator vouches that its ``maxmemory-policy`` is ``noeviction``.
* ``prefix=NAME`` (default ``unbroken``): the key prefix, so several stores can share a database.
* ``retry_for=SECONDS`` (default 10): how long one operation keeps retrying while the server is
  unreachable (a restart, a fail-over) before it raises ``StoreUnavailable``.
* ``pool_size=N`` (default 8): the most connections this process opens, and so the threads that
  may work on the store at once (``Agent.arun`` hands its store work to that many).

Every conditional write is one Lua script (``_redis_scripts``), so its check and its writes are one
atomic step on the server; lease times come from the server's clock (``TIME``). Redis Cluster is
not supported (a save touches keys of several hash slots).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from .. import crashpoints
from ..codec import EncodedSave, PackedRecords, StoredRecord, dumps
from ..errors import CorruptCheckpoint, InvalidStoreURL, StoreUnavailable
from ..state import LedgerEntry, RunSummary
from . import _redis_scripts as lua
from ._redis_queue import RedisQueue, parse_submission
from ._redis_settings import LEVELS, UNKNOWN, ServerSettings, assume_noeviction, check_durability, split_url, where_of
from ._retry import retry_until_deadline
from .backend import (
    Durability,
    Reach,
    Refused,
    RunHead,
    SealedEntry,
    Submission,
    newest_snapshot_between,
    seal,
)
from .base import Store

T = TypeVar("T")
DEFAULT_POOL_SIZE = 8
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


class RedisBackend(RedisQueue):
    """The primitives of a run store in a Redis database. Safe to share between threads; a
    forked child opens its own connections (redis-py's pool notices the fork). Declares
    ``ServerCheck``, ``RawReads``, ``PackedReads`` and ``OneStepClaim`` (``_redis_queue``)."""

    reach: Reach = "network"
    lease_clock_is_store_time = True  # both are the server's TIME

    def __init__(self, url: str) -> None:
        self.url = url
        client_url, options = split_url(url)
        self.where = where_of(url)
        self.prefix = options.get("prefix", "unbroken")
        level = options.get("durability", "full")
        if level not in LEVELS:
            raise InvalidStoreURL(f"durability={level!r} in store URL; use one of {', '.join(LEVELS)}")
        self.level = level
        self.assume_noeviction = assume_noeviction(options)
        if not self.prefix or any(ch in self.prefix for ch in " :*?[]{}"):
            raise InvalidStoreURL(f"prefix={self.prefix!r} in store URL; use letters, digits, '-', '_' or '.'")
        try:
            self.retry_for = float(options.get("retry_for", "10"))
        except ValueError as exc:
            raise InvalidStoreURL(f"retry_for in store URL is not a number: {exc}") from exc
        if not 0 <= self.retry_for <= 3600:
            raise InvalidStoreURL("retry_for in store URL must be between 0 and 3600 seconds")
        pool_size = options.get("pool_size", str(DEFAULT_POOL_SIZE))
        if not pool_size.isdigit() or not 1 <= int(pool_size) <= 1024:
            raise InvalidStoreURL(f"pool_size={pool_size!r} in store URL; use a whole number from 1 to 1024")
        self.concurrency = int(pool_size)
        try:
            # A blocking pool: a thread past pool_size waits for a free connection instead of opening more.
            pool = redis.BlockingConnectionPool.from_url(
                client_url, max_connections=self.concurrency, timeout=20, socket_connect_timeout=5, socket_timeout=30
            )
            self._client = redis.Redis(connection_pool=pool)
        except ValueError as exc:
            raise InvalidStoreURL(f"store URL is not a valid Redis URL: {exc}") from exc
        self._lock = threading.Lock()
        self._scripts = {
            name: self._client.register_script(getattr(lua, name))
            for name in (
                *("SWAP_HEAD", "WRITE_RECORD", "REPLACE_RECORDS", "WRITE_ENTRY", "ADD_SUBMISSION", "CLAIM"),
                *("RECORDS_BETWEEN", "SUMMARIES_AFTER", "QUEUE_AFTER"),
            )
        }
        self.durability = self.check_server()

    # ------------------------------------------------------------------ plumbing

    def _key(self, kind: str, run_id: str = "") -> str:
        return f"{self.prefix}:{kind}:{run_id}" if run_id else f"{self.prefix}:{kind}"

    def _call(self, op: Callable[[bool], T]) -> T:
        """Run ``op(retried)``, retrying while the server is unreachable, for up to ``retry_for``
        seconds (``_retry``). ``retried`` tells ``op`` that an earlier attempt may have been applied."""

        def attempt(retried: bool) -> T:
            try:
                return op(retried)
            except _TRANSIENT:
                raise  # retried below
            except redis.RedisError as exc:
                raise StoreUnavailable(f"Redis at {self.where}: {exc}") from exc

        return retry_until_deadline(
            attempt, retry_for=self.retry_for, transient=_TRANSIENT, unreachable=self._unreachable
        )

    def _unreachable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"Redis at {self.where} is unreachable ({exc}); gave up after {self.retry_for:g}s. "
            "The run is intact at its last save point."
        )

    def server_settings(self) -> ServerSettings:
        """The server's persistence and eviction settings: ``CONFIG GET`` (one round trip), or
        ``INFO`` where CONFIG is renamed or disabled (as on many managed services)."""
        try:
            append, policy = self._call(self._config_get)
            found = {_text(key): _text(value) for reply in (append, policy) for key, value in reply.items()}
            return ServerSettings(
                found.get("appendonly", "no"), found.get("appendfsync", "no"), found.get("maxmemory-policy", UNKNOWN)
            )
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, redis.ResponseError):  # CONFIG renamed or disabled
                raise
        info = self._info("persistence")
        memory = self._info("memory")
        appendonly = ("yes" if info.get("aof_enabled") else "no") if info else f"{UNKNOWN} (INFO is disabled)"
        policy = _text(memory.get("maxmemory_policy", f"{UNKNOWN} (CONFIG GET and INFO memory are disabled)"))
        return ServerSettings(appendonly, "unknown (CONFIG is disabled on this server)", policy)

    def _config_get(self, _: bool) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        pipe.config_get("append*")
        pipe.config_get("maxmemory-policy")
        return list(pipe.execute())

    def _info(self, section: str) -> dict[str, Any]:
        try:
            return dict(self._call(lambda _: self._client.info(section)))
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, redis.ResponseError):
                raise
            return {}

    def check_server(self) -> Durability:
        """What the server gives now; ``InsufficientDurability`` if it no longer keeps what the
        URL asks (read at open and at every lease acquisition: CONFIG SET changes it live)."""
        return check_durability(
            self.level, self.server_settings(), self.where, assumed_noeviction=self.assume_noeviction
        )

    def close(self) -> None:
        self._client.close()
        self._client.connection_pool.disconnect()  # ours, given to the client: it does not close it

    # ------------------------------------------------------------------ head and clock

    def store_time(self) -> float:
        seconds, micros = self._call(lambda _: self._client.time())
        return float(seconds) + float(micros) / 1e6

    def read_head(self, run_id: str) -> RunHead | None:
        return self._call(lambda _: self._head_now(run_id))

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        old = expected or RunHead()
        args = [
            "0" if expected is None else "1",
            str(old.seq),
            str(old.fence),
            old.owner or "",
            repr(float(old.expires_at)),
            str(new.fence),
            new.owner or "",
            repr(float(new.expires_at)),
        ]
        script = self._scripts["SWAP_HEAD"]
        wanted = RunHead(old.seq, new.fence, new.owner, float(new.expires_at))

        def op(retried: bool) -> bool:
            if script(keys=[self._key("head", run_id)], args=args):
                return True
            # A retry after a lost reply finds the head already swapped by the first attempt.
            return retried and self._head_now(run_id) == wanted

        return self._call(op)

    def _head_now(self, run_id: str) -> RunHead | None:
        seq, fence, owner, expires = self._client.hmget(self._key("head", run_id), ("seq", "fence", "owner", "expires"))
        if fence is None:
            return None
        return RunHead(int(seq or 0), int(fence), _text(owner) or None, float(expires or 0.0))

    # ------------------------------------------------------------------ records

    @staticmethod
    def _element(save: EncodedSave) -> bytes:
        return f"{save.seq} {save.checksum} ".encode() + save.body_bytes()

    def _summary_args(self, save: EncodedSave) -> list[str]:
        s = save.summary
        return [s.task, s.phase, str(s.turns), str(s.tokens_used), repr(float(s.updated_at))]

    def _run_keys(self, run_id: str) -> list[str]:
        return [self._key("head", run_id), self._key("rec", run_id), self._key("led", run_id), self._key("runs")]

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        element = self._element(save)
        args: list[Any] = [str(expect_seq), "" if fence is None else str(fence), str(save.seq), element]
        args += [*self._summary_args(save), save.run_id]
        for sealed in entries:
            args += [sealed.entry.key, _entry_value(sealed)]
        script = self._scripts["WRITE_RECORD"]

        def op(retried: bool) -> None:
            crashpoints.hit("redis.before_write")
            if script(keys=self._run_keys(save.run_id), args=args):
                return
            if retried and self._last_element(save.run_id) == element:
                return  # the attempt whose reply was lost had written it
            raise Refused

        self._call(op)

    def _last_element(self, run_id: str) -> bytes | None:
        last = self._client.lrange(self._key("rec", run_id), -1, -1)
        return _raw(last[0]) if last else None

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        last = saves[-1]
        args: list[Any] = [str(expect_seq), "" if fence is None else str(fence), str(last.seq)]
        args += [*self._summary_args(last), run_id, str(len(saves))]
        args += [self._element(save) for save in saves]
        for save in saves:
            for entry in save.ledger:
                args += [entry.key, _entry_value(seal(entry))]
        script = self._scripts["REPLACE_RECORDS"]

        last_element = self._element(last)

        def op(retried: bool) -> None:
            if script(keys=self._run_keys(run_id), args=args):
                return
            if retried and self._last_element(run_id) == last_element:
                return  # the attempt whose reply was lost had replaced them
            raise Refused

        self._call(op)

    def _elements(self, run_id: str) -> list[bytes]:
        return [_raw(e) for e in self._call(lambda _: self._client.lrange(self._key("rec", run_id), 0, -1))]

    @staticmethod
    def _split(element: bytes) -> tuple[int, str, bytes]:
        try:
            seq, check, body = element.split(b" ", 2)
            return int(seq), check.decode(), body
        except ValueError:  # (UnicodeDecodeError too) the element's "seq checksum " header is damaged
            raise CorruptCheckpoint(
                f"a save record in Redis has a damaged header ({bytes(element[:40])!r}...): its seq and checksum "
                "cannot be read; nothing was changed. Restore the run from a backup, or `unbroken recover` it",
                last_good_seq=None,
            ) from None

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        records = []
        for element in self._elements(run_id):
            seq, check, body = self._split(element)
            if seq > after_seq:
                records.append(StoredRecord(seq, body.decode("utf-8", errors="replace"), check))
        return records

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        records = []
        for element in self._elements(run_id):
            seq, check, body = self._split(element)
            records.append(StoredRecord(seq, body, check))
        return records

    def read_packed(self, run_id: str) -> PackedRecords | None:
        elements = self._elements(run_id)
        if not elements:
            return None
        bodies, index = [], []
        for element in elements:
            seq, check, body = self._split(element)
            bodies.append(body)
            index.append((seq, check, len(body)))
        return PackedRecords(b"[" + b",".join(bodies) + b"]", index)

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        # Bounded: one read-only script takes the list elements of the range by position (LRANGE).
        script, keys = self._scripts["RECORDS_BETWEEN"], [self._key("rec", run_id)]
        elements = self._call(lambda _: script(keys=keys, args=[str(int(after_seq)), str(int(upto_seq))]))
        records = []
        for element in elements:
            seq, check, body = self._split(_raw(element))
            if after_seq < seq <= upto_seq:
                records.append(StoredRecord(seq, body.decode("utf-8", errors="replace"), check))
        return records

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        """The flag is inside each body (the list keeps seq, checksum, body): read back from
        ``upto_seq`` (default: the newest) a few records at a time, parsing each body, until a
        snapshot. Costs the records since the previous snapshot (``snapshot_every``: 50 by
        default), not the run. Each step is one consistent read; a rewrite between two steps
        may give an answer from either version (as any read racing a rewrite)."""
        first = self._call(lambda _: self._client.lindex(self._key("rec", run_id), 0))
        last = self._call(lambda _: self._client.lindex(self._key("rec", run_id), -1))
        if first is None or last is None:
            return 0
        lowest = self._split(_raw(first))[0]
        top = self._split(_raw(last))[0] if upto_seq is None else min(upto_seq, self._split(_raw(last))[0])
        return newest_snapshot_between(self, run_id, lowest, top)

    def list_summaries(self) -> list[RunSummary]:
        run_ids = [_text(r) for r in self._call(lambda _: self._client.zrange(self._key("runs"), 0, -1))]
        fields = ("task", "phase", "turns", "tokens", "seq", "updated")

        def fetch(_: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.hmget(self._key("head", run_id), fields)
            return pipe.execute()

        summaries = []
        for run_id, row in zip(run_ids, self._call(fetch) if run_ids else [], strict=True):
            task, phase, turns, tokens, seq, updated = row
            if seq is None or int(seq) == 0:
                continue
            summaries.append(
                RunSummary(run_id, _text(task), _text(phase), int(turns), int(tokens), int(seq), float(updated))
            )
        return summaries

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        """Bounded: the ``runs`` sorted set is ordered by updated_at then run id, so a page is a
        rank range after the cursor's run (O(log runs + limit)). When that run moved or went
        since the last page, the page is taken by score instead, reading the runs tied at the
        cursor's updated_at too. Summaries come from the heads, like ``list_summaries``."""
        page: list[RunSummary] = []
        fields = ("task", "phase", "turns", "tokens", "seq", "updated")
        while len(page) < limit:
            members = self._members_after(after, limit - len(page))
            if not members:
                break

            def fetch(_: bool, members: list[tuple[str, float]] = members) -> list[Any]:
                pipe = self._client.pipeline(transaction=False)
                for run_id, _score in members:
                    pipe.hmget(self._key("head", run_id), fields)
                return pipe.execute()

            for (run_id, _score), row in zip(members, self._call(fetch), strict=True):
                task, phase, turns, tokens, seq, updated = row
                if seq is not None and int(seq) > 0:  # else deleted since the page was read
                    page.append(
                        RunSummary(run_id, _text(task), _text(phase), int(turns), int(tokens), int(seq), float(updated))
                    )
            after = (members[-1][1], members[-1][0])
        return page

    def _members_after(self, after: tuple[float, str] | None, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` (run id, score) of the ``runs`` set strictly after ``after``, newest first."""
        key = self._key("runs")
        if after is None:
            first: list[Any] = self._call(lambda _: self._client.zrevrange(key, 0, limit - 1, withscores=True))
            return [(_text(member), float(score)) for member, score in first]
        updated, run_id = after
        script = self._scripts["SUMMARIES_AFTER"]
        flat = self._call(lambda _: script(keys=[key], args=[str(limit), run_id, repr(float(updated))]))
        if flat is not None:  # the script's false comes back as None: the cursor's run moved
            return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]

        def by_score(_: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=True)  # one consistent read of both ranges
            pipe.zrevrangebyscore(key, updated, updated, withscores=True)  # the ties: run id decides
            pipe.zrevrangebyscore(key, f"({updated!r}", "-inf", start=0, num=limit, withscores=True)
            return pipe.execute()

        ties, older = self._call(by_score)
        mark = run_id.encode()
        rows: list[Any] = [(m, s) for m, s in ties if _raw(m) < mark] + list(older)
        return [(_text(member), float(score)) for member, score in rows[:limit]]

    def remove_run(self, run_id: str) -> None:
        def op(_: bool) -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._key("head", run_id), self._key("rec", run_id), self._key("led", run_id))
            pipe.zrem(self._key("runs"), run_id)
            pipe.hdel(self._key("subs"), run_id)
            pipe.zrem(self._key("queue"), run_id)
            pipe.execute()

        self._call(op)

    # ------------------------------------------------------------------ effect ledger

    def _write_entry(self, sealed: SealedEntry, fence: int | None, only_if_absent: bool) -> SealedEntry | None:
        run_id, value = sealed.entry.run_id, _entry_value(sealed)
        args: list[bytes | str] = ["" if fence is None else str(fence), sealed.entry.key, value]
        args.append("1" if only_if_absent else "0")
        script = self._scripts["WRITE_ENTRY"]

        def op(retried: bool) -> SealedEntry | None:
            outcome = script(keys=[self._key("head", run_id), self._key("led", run_id)], args=args)
            if outcome[0] == -1:
                raise Refused
            if outcome[0] == 1 or (retried and bytes(outcome[1]) == value):
                return None  # written now (or by the attempt whose reply was lost)
            return _parse_entry(outcome[1])

        return self._call(op)

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        return self._write_entry(sealed, fence, only_if_absent=True)

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        self._write_entry(sealed, fence, only_if_absent=False)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        value = self._call(lambda _: self._client.hget(self._key("led", run_id), key))
        return _parse_entry(_raw(value)) if value is not None else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        return [_parse_entry(_raw(v)) for v in self._call(lambda _: self._client.hvals(self._key("led", run_id)))]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        if keys:
            self._call(lambda _: self._client.hdel(self._key("led", run_id), *keys))

    # ------------------------------------------------------------------ submissions

    def add_submission(self, submission: Submission) -> Submission | None:
        data = {"task": submission.task, "agent": submission.agent, "submitted_at": submission.submitted_at}
        args = [submission.run_id, json.dumps(data), repr(float(submission.submitted_at))]
        script, keys = self._scripts["ADD_SUBMISSION"], [self._key("subs"), self._key("queue")]
        stored = self._call(lambda _: script(keys=keys, args=args))
        return parse_submission(submission.run_id, stored) if stored else None

    def list_submissions(self) -> list[Submission]:
        rows = self._call(lambda _: self._client.hgetall(self._key("subs")))
        queued = [parse_submission(_text(run_id), _raw(value)) for run_id, value in rows.items()]
        return sorted(queued, key=lambda s: (s.submitted_at, s.run_id))

    def submission(self, run_id: str) -> Submission | None:
        value = self._call(lambda _: self._client.hget(self._key("subs"), run_id))
        return parse_submission(run_id, _raw(value)) if value is not None else None


def _raw(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry_value(sealed: SealedEntry) -> bytes:
    return f"{sealed.checksum or '-'} {dumps(sealed.entry.to_json())}".encode()


def _parse_entry(value: bytes) -> SealedEntry:
    check, _, text = bytes(value).partition(b" ")
    try:
        entry = LedgerEntry.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptCheckpoint(
            f"an effect ledger entry in Redis does not parse ({exc}); nothing was changed. Restore it from a "
            "backup; its result is not given to the model",
            last_good_seq=None,
        ) from exc
    return SealedEntry(entry, None if check == b"-" else check.decode())


class RedisStore(Store):
    """A run store in a Redis database: ``Store``'s rules over ``RedisBackend``."""

    backend: RedisBackend

    def __init__(self, url: str) -> None:
        super().__init__(RedisBackend(url))

    def check_server(self) -> Durability:
        """What the server gives now (``InsufficientDurability`` if less than the URL asks)."""
        return self.backend.check_server()

    def server_settings(self) -> ServerSettings:
        """The server's persistence and eviction settings, as it reports them."""
        return self.backend.server_settings()
