"""The Redis store's queue, read a page at a time: claims, the queued-runs listing and a run's
phase cost about a page of keys, however long the queue.

Keys (``_redis_scripts`` draws the whole layout): ``P:queue`` is a sorted set of the submitted
runs not yet seen finished, scored by submission time, so its own order (score, then run id
byte by byte) is the queue's (submitted_at, run_id) order (run ids are ASCII: the same order
as Python's); ``P:subs`` holds each submission by run id; a run's phase is a field of its head
hash. A page is one read-only script (``QUEUE_AFTER``: rank of the cursor's run, then a rank
range, O(log queue + limit)), then one pipelined read of the page's submissions and heads.
Nothing here is new on the server: stores written by earlier versions are read as they are.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import redis

from ..state import TERMINAL_PHASES, Lease
from .backend import ClaimedRun, QueueBackend, RunHead, Submission, claimable

T = TypeVar("T")


class QueueRow(NamedTuple):
    """One queued run as a page reads it: its submission and what its head says now."""

    run_id: str
    submitted_at: float
    submission: bytes | None
    """The submission's JSON (None: removed since the page was read)."""
    phase: str | None
    """The phase of its last save (None: none yet)."""
    seq: int
    owner: str | None
    """Its lease holder (None: nobody; the lease may have expired)."""
    expires: float


class RedisQueue(QueueBackend):
    """The queue reads of ``RedisBackend`` (its base; uses its connection helpers)."""

    _client: redis.Redis
    _scripts: dict[str, Any]

    def _key(self, kind: str, run_id: str = "") -> str:
        raise NotImplementedError

    def _call(self, op: Callable[[bool], T]) -> T:
        raise NotImplementedError

    # ------------------------------------------------------------------ one page

    def _queue_after(self, after: tuple[float, str] | None, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` (run id, submitted_at) of the queue strictly after the cursor, oldest
        first. When the cursor's run left the queue since, the runs tied at its time are read
        to find the ones after it (runs submitted in the same microsecond: few)."""
        key = self._key("queue")
        if limit <= 0:
            return []
        if after is None:
            first: list[Any] = self._call(lambda _: self._client.zrange(key, 0, limit - 1, withscores=True))
            return [(_text(member), float(score)) for member, score in first]
        submitted_at, run_id = after
        script = self._scripts["QUEUE_AFTER"]
        flat = self._call(lambda _: script(keys=[key], args=[str(limit), run_id, repr(float(submitted_at))]))
        if flat is not None:  # the script's false comes back as None: the cursor's run left
            return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]

        def by_score(_: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=True)  # one consistent read of both ranges
            pipe.zrangebyscore(key, submitted_at, submitted_at, withscores=True)  # ties: run id decides
            pipe.zrangebyscore(key, f"({submitted_at!r}", "+inf", start=0, num=limit, withscores=True)
            return list(pipe.execute())

        ties, later = self._call(by_score)
        mark = run_id.encode()
        rows: list[Any] = [(m, s) for m, s in ties if _raw(m) > mark] + list(later)
        return [(_text(member), float(score)) for member, score in rows[:limit]]

    def _queue_rows(self, after: tuple[float, str] | None, limit: int) -> list[QueueRow]:
        """A page of the queue with each run's submission and head (one more pipelined round
        trip: one HMGET of the submissions, one HMGET per head)."""
        members = self._queue_after(after, limit)
        if not members:
            return []

        def fetch(_: bool) -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(self._key("subs"), [run_id for run_id, _score in members])
            for run_id, _score in members:
                pipe.hmget(self._key("head", run_id), ("phase", "seq", "owner", "expires"))
            return list(pipe.execute())

        replies = self._call(fetch)
        rows: list[QueueRow] = []
        for (run_id, score), value, head in zip(members, replies[0], replies[1:], strict=True):
            phase, seq, owner, expires = head
            rows.append(
                QueueRow(
                    run_id,
                    score,
                    None if value is None else _raw(value),
                    _text(phase) if phase else None,
                    int(seq or 0),
                    _text(owner) if owner else None,
                    float(expires or 0.0),
                )
            )
        return rows

    def _pages(self, after: tuple[float, str] | None) -> Iterator[QueueRow]:
        """The queue's rows from the cursor on, a page (``CLAIM_PAGE``-sized) at a time, lazily."""
        from .base import CLAIM_PAGE

        while True:
            rows = self._queue_rows(after, CLAIM_PAGE)
            yield from rows
            if len(rows) < CLAIM_PAGE:
                return
            after = (rows[-1].submitted_at, rows[-1].run_id)

    # ------------------------------------------------------------------ the primitives

    def phase_of(self, run_id: str) -> str | None:
        """One HMGET of the run's head (O(1))."""
        phase, seq = self._call(lambda _: self._client.hmget(self._key("head", run_id), ("phase", "seq")))
        return _text(phase) if phase is not None and int(seq or 0) > 0 else None

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        """Pages of the queue until ``limit`` runs with no save point are found: about ``limit``
        keys, plus the queued runs started and not finished that lie before them (as on SQLite
        and PostgreSQL, whose index holds started runs too)."""
        page: list[Submission] = []
        for row in self._pages(after):
            if len(page) >= limit:
                break
            if row.seq == 0 and row.submission is not None:
                page.append(parse_submission(row.run_id, row.submission, row.submitted_at))
        return page

    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]:
        """Pages of the queue until ``limit`` runs for ``agent`` whose phase is not ``blocked``
        are found (a short page is the last)."""
        page: list[Submission] = []
        for row in self._pages(after) if limit > 0 else ():
            if row.submission is None or (row.seq > 0 and row.phase in blocked):
                continue
            queued = parse_submission(row.run_id, row.submission, row.submitted_at)
            if agent is None or queued.agent == agent:
                page.append(queued)
                if len(page) >= limit:
                    break
        return page

    def claim_in_one_step(
        self, owner: str, ttl: float, *, agent: str | None, limit: int, blocked: frozenset[str]
    ) -> list[ClaimedRun]:
        """``Store.claim_runnable``'s rule (``OneStepClaim``), a page of the queue at a time: the
        rule (``claimable``: a lease free, or expired on the server's clock, read once, and its
        holder not alive on this host) judges each run's head as the page read it, and the script
        takes the lease only if that head's holder is still the one judged, with the phase (not in
        ``blocked``) and the expiry checked again in the same step. A run seen finished leaves the
        queue. Runs the rule refuses are passed over without a script call: a queue headed by
        running runs costs a page of reads per 64 of them."""
        script = self._scripts["CLAIM"]
        phases = (",".join(sorted(blocked)), ",".join(sorted(TERMINAL_PHASES)))
        claimed: list[ClaimedRun] = []
        now = self.lease_time()  # passing over a lease live now only leaves the run to a later claim
        for row in self._pages(None):
            if len(claimed) >= limit:
                break
            if row.submission is None or (row.seq > 0 and row.phase in blocked - TERMINAL_PHASES):
                continue  # paused or awaiting a person: the script would refuse it too
            if not claimable(RunHead(row.seq, 0, row.owner, row.expires), now):
                continue  # held, or its holder is alive on this host whatever the expiry says
            queued = parse_submission(row.run_id, row.submission, row.submitted_at)
            if agent is not None and queued.agent != agent:
                continue
            run_id = row.run_id
            keys = [self._key("head", run_id), self._key("queue")]
            args = [owner, repr(float(ttl)), *phases, run_id, row.owner or ""]
            got = self._call(functools.partial(_run_script, script, keys, args))
            if got:
                lease = Lease(run_id, owner, int(got[0]), float(got[1]), previous_fence=int(got[2]))
                claimed.append(ClaimedRun(run_id, queued.task, queued.agent, lease))
        return claimed


def _run_script(script: Any, keys: list[str], args: list[str], _: bool) -> Any:
    return script(keys=keys, args=args)


def _raw(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_submission(run_id: str, value: bytes, submitted_at: float | None = None) -> Submission:
    data = json.loads(value)
    at = float(data["submitted_at"]) if submitted_at is None else submitted_at
    return Submission(run_id, data["task"], data["agent"], at)
