"""``s3://BUCKET/PREFIX``: runs kept in object storage, for workers with no database.

URL options: ``endpoint=URL`` (an S3-compatible service; default: AWS, from the usual AWS
settings), ``region=NAME``. Credentials come from the usual AWS environment (``AWS_ACCESS_KEY_ID``
and friends, a profile, an instance role); they never appear in the URL.

Layout under the prefix, per run::

    runs/RUN/head               the run head: seq, fence, owner, expiry, summary, and where the
                                records are (segments, and the loose tail)
    runs/RUN/rec/SEQ-NONCE      one save record, written create-only, never changed
    runs/RUN/seg/FIRST-LAST-N   older records packed into one object (``PACK_EVERY`` at first,
                                merged by doubling up to ``MAX_SEGMENT``)
    runs/RUN/led/KEY            one effect-ledger entry
    queue/RUN                   a submission for workers, written create-only
    order/MICROS-RUN            empty, named to sort in queue order (``_s3_queue``)

A save is two writes. First the record, create-only under a name no one else uses; then the head,
by compare-and-set on its ETag (If-Match), moving ``seq`` to the new record only if the head's seq
and fence are still the ones the writer expects. The head is the one commit point: a second writer
of the same position, or a writer whose lease was taken over, fails there and its record object is
never referenced (a crash between the two writes leaves the same harmless orphan). Every
``PACK_EVERY`` saves the writer also packs the loose records into one segment object, named in the
same head write, so a resume reads the head and then a few large objects in parallel.

Leases are judged on the service's clock (read from its ``Date`` header at open, to about a
second), so use lease TTLs of ten seconds or more. At open the store proves on a scratch object
that the service honours If-None-Match and If-Match, and raises ``MissingStoreFeature`` if not.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from .. import crashpoints
from ..acceptance import run_seed
from ..codec import EncodedSave, PackedRecords, StoredRecord, checksum
from ..state import Lease, RunSummary
from ._s3_layout import Head, empty_head, pack, parse_url, summary_json, unpack
from ._s3_ledger import S3Ledger, sealed_json
from ._s3_objects import Bucket, PreconditionFailed
from ._s3_queue import S3Queue
from .backend import (
    ClaimedRun,
    QueueBackend,
    Reach,
    Refused,
    RunHead,
    SealedEntry,
    Submission,
    claimable,
    newest_snapshot_between,
    seal,
)
from .base import CLAIM_PAGE, Store, next_fence

PACK_EVERY = 64
"""Loose records a run may have before the next save packs them into a segment."""
MAX_SEGMENT = 4096
"""The most records one segment object holds (~5 MB at 1.2 KB a record)."""
_CAS_ATTEMPTS = 20
MISSING = "missing"  # the checksum of a record whose object is gone: it can never match
_INDEX_PROBE = 64 * 1024  # bytes read first from a segment read in part: its index line, often some bodies


class S3Backend(S3Ledger, S3Queue, QueueBackend):
    """The primitives of a run store in an S3 bucket (or an S3-compatible service with
    conditional writes). Declares ``RawReads``, ``PackedReads`` and ``OneStepClaim``."""

    reach: Reach = "network"
    durability = "power_loss"  # an object store acknowledges a put once it is stored redundantly
    concurrency = 10  # botocore's default pool: 10 connections per client

    def __init__(self, url: str) -> None:
        self.url = url
        bucket, prefix, options = parse_url(url)
        endpoint = options.get("endpoint") or None
        where = f"s3://{bucket}/{prefix}" + (f" at {endpoint}" if endpoint else "")
        self.objects = Bucket(bucket, prefix, endpoint=endpoint, region=options.get("region") or None, where=where)
        self._lock = threading.Lock()
        self._heads: dict[str, tuple[Head, str]] = {}
        self._loose: dict[str, dict[str, tuple[int, str, bytes]]] = {}
        """Per run, the loose records this process wrote or read, by object name (unique per write)."""
        self._copied: set[str] = set()
        """Records whose pending ledger entries this process has copied to their objects."""
        self.objects.check_conditional_writes()
        self.build_queue_order()

    def close(self) -> None:
        self.objects.close()

    # ------------------------------------------------------------------ the head object

    @staticmethod
    def _head_name(run_id: str) -> str:
        return f"runs/{run_id}/head"

    def _fetch_head(self, run_id: str) -> tuple[Head, str] | None:
        found = self.objects.get(self._head_name(run_id))
        if found is None:
            with self._lock:
                self._heads.pop(run_id, None)
            return None
        head: Head = json.loads(found[0])
        with self._lock:
            self._heads[run_id] = (head, found[1])
        return head, found[1]

    def _cached_head(self, run_id: str) -> tuple[Head, str] | None:
        with self._lock:
            cached = self._heads.get(run_id)
        return cached if cached is not None else self._fetch_head(run_id)

    def _put_head(self, run_id: str, head: Head, etag: str | None) -> bool:
        """Compare-and-set: write ``head`` iff the stored one still has ``etag`` (None: absent)."""
        head = {**head, "version": head.get("version", 0) + 1}  # never the same bytes twice
        try:
            new_etag = self.objects.put(
                self._head_name(run_id), json.dumps(head).encode(), if_match=etag, create_only=etag is None
            )
        except PreconditionFailed:
            with self._lock:
                self._heads.pop(run_id, None)
            return False
        with self._lock:
            self._heads[run_id] = (head, new_etag)
        return True

    @staticmethod
    def _as_run_head(head: Head) -> RunHead:
        return RunHead(int(head["seq"]), int(head["fence"]), head["owner"], float(head["expires_at"]))

    def store_time(self) -> float:
        return self.objects.now()

    def read_head(self, run_id: str) -> RunHead | None:
        found = self._fetch_head(run_id)
        return self._as_run_head(found[0]) if found is not None else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        found = self._cached_head(run_id)
        for attempt in range(2):  # the cached head may be stale: one fresh read decides
            current = self._as_run_head(found[0]) if found is not None else None
            if current == expected:
                base: Head = found[0] if found is not None else empty_head()
                changed = {**base, "fence": new.fence, "owner": new.owner, "expires_at": new.expires_at}
                if self._put_head(run_id, changed, found[1] if found is not None else None):
                    return True
            if attempt == 0:
                found = self._fetch_head(run_id)
        return False

    # ------------------------------------------------------------------ records

    def _check(self, found: tuple[Head, str] | None, expect_seq: int, fence: int | None) -> bool:
        head = found[0] if found is not None else empty_head()
        return int(head["seq"]) == expect_seq and (fence is None or int(head["fence"]) == fence)

    def _commit(self, run_id: str, expect_seq: int, fence: int | None, change: Any, done: Any) -> None:
        """Apply ``change(head) -> head`` by compare-and-set while the head's seq and fence are as
        expected; ``Refused`` as soon as they are not (``done(head)``: a lost reply had committed)."""
        found = self._cached_head(run_id)
        for attempt in range(_CAS_ATTEMPTS):
            if not self._check(found, expect_seq, fence):
                if attempt == 0:  # the cached head may be stale
                    found = self._fetch_head(run_id)
                    if self._check(found, expect_seq, fence):
                        continue
                if found is not None and done(found[0]):
                    return
                raise Refused
            crashpoints.hit("s3.before_head")
            base = found[0] if found is not None else empty_head()
            if self._put_head(run_id, change(base), found[1] if found is not None else None):
                return
            found = self._fetch_head(run_id)
        raise Refused

    def _write_loose(self, run_id: str, records: Sequence[tuple[int, str, bytes]], kind: str) -> str:
        """Write records as a new object under a name nobody else uses (create-only, so nothing
        is ever overwritten); a name clash or a 409 from a racing request gets a new name."""
        first, last = records[0][0], records[-1][0]
        stem = f"{first:012d}" if kind == "rec" else f"{first:012d}-{last:012d}"
        body = pack(records)
        for _ in range(3):
            name = f"runs/{run_id}/{kind}/{stem}-{uuid.uuid4().hex[:12]}"
            try:
                self.objects.put(name, body, create_only=True)
                return name
            except PreconditionFailed:
                continue
        raise Refused

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        run_id = save.run_id
        found = self._cached_head(run_id)
        if not self._check(found, expect_seq, fence):
            found = self._fetch_head(run_id)
            if not self._check(found, expect_seq, fence):
                raise Refused
        previous = found[0] if found is not None else empty_head()
        if previous.get("pending") and previous.get("pending_of") not in self._copied:
            self._copy_pending(previous)  # its writer died before copying: this save drops them
        record = (save.seq, save.checksum, save.body_bytes())
        crashpoints.hit("s3.before_record")
        name = self._write_loose(run_id, [record], "rec")
        loose = self._loose.setdefault(run_id, {})
        loose[name] = record
        packed: list[tuple[list[Any], list[str]]] = []  # (new segment list, superseded objects)

        def change(head: Head) -> Head:
            tail, segments = [*head["tail"], [save.seq, name]], head["segments"]
            if len(tail) >= PACK_EVERY:
                if not packed:  # a retried compare-and-set reuses it: segments and tail are the same
                    packed.append(self._pack(run_id, segments, tail))
                if packed[0][0]:
                    segments, tail = packed[0][0], []
            summary = summary_json(save)
            new = {**head, "seq": save.seq, "summary": summary, "segments": segments, "tail": tail}
            # A1/A2: the save's ledger entries become visible in the same write as its record.
            return {**new, "pending": [sealed_json(sealed) for sealed in entries], "pending_of": name}

        def done(head: Head) -> bool:
            return int(head["seq"]) == save.seq and (
                [save.seq, name] in head["tail"] or bool(packed and packed[0][0] == head["segments"])
            )

        self._commit(run_id, expect_seq, fence, change, done)
        if entries:
            self.objects.parallel(self._put_entry_object, entries)
        self._copied.add(name)
        if packed and packed[0][0]:
            loose.clear()  # packed into a segment: the next segment starts afresh
            self.objects.delete(packed[0][1])  # no head names them now; readers of an older head retry

    def _pack(self, run_id: str, segments: Sequence[Any], tail: Sequence[Sequence[Any]]) -> tuple[list[Any], list[str]]:
        """Write the tail's records as one segment, merged with the newest segments while they
        hold as many records (a binary counter: a run of N saves keeps about log2(N / PACK_EVERY)
        segments, none over ``MAX_SEGMENT`` records). Returns the new segment list and the names
        of the objects it supersedes."""
        loose = self._loose.setdefault(run_id, {})
        for seq, name in tail:
            if name not in loose:
                loose[name] = self._read_objects([[seq, seq, name]])[0]
        records = [loose[name] for _, name in tail]
        if not _intact(run_id, records):
            return [], []  # damage is never packed away (nor its evidence deleted): leave it loose
        kept, superseded = list(segments), [str(name) for _, name in tail]
        while kept and int(kept[-1][1]) - int(kept[-1][0]) + 1 == len(records) and 2 * len(records) <= MAX_SEGMENT:
            older = self._read_objects([kept[-1]])
            if not _intact(run_id, older):
                break
            records = older + records
            superseded.append(str(kept.pop()[2]))
        segment = [records[0][0], records[-1][0], self._write_loose(run_id, records, "seg")]
        return [*kept, segment], superseded

    def _read_objects(self, spans: Sequence[Sequence[Any]]) -> list[tuple[int, str, bytes]]:
        """The records of the objects named in ``spans`` ([first, last, name] each), in order."""

        def read(span: Sequence[Any]) -> list[tuple[int, str, bytes]]:
            first, last, name = int(span[0]), int(span[1]), str(span[2])
            found = self.objects.get(name)
            if found is None:
                return [(seq, MISSING, b"") for seq in range(first, last + 1)]
            return unpack(found[0], range(first, last + 1))

        return [record for records in self.objects.parallel(read, spans) for record in records]

    def _records(self, run_id: str, after_seq: int) -> list[tuple[int, str, bytes]]:
        for _ in range(_CAS_ATTEMPTS):
            found = self._fetch_head(run_id)
            if found is None:
                return []
            head = found[0]
            spans = [span for span in head["segments"] if int(span[1]) > after_seq]
            spans += [[seq, seq, name] for seq, name in head["tail"] if int(seq) > after_seq]
            records = [r for r in self._read_objects(spans) if r[0] > after_seq]
            if all(check != MISSING for _, check, _ in records):
                break
            # An object the head named is gone: a writer packed or rewrote the run meanwhile (it
            # deletes what its new head no longer names). Read the new head; if it did not
            # move, the object is lost and the records come back marked missing.
            again = self._fetch_head(run_id)
            if again is None or again[1] == found[1]:
                break
        by_seq = {record[0]: record for record in records}
        self._loose[run_id] = {str(name): by_seq[int(seq)] for seq, name in head["tail"] if int(seq) in by_seq}
        return records

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        return [
            StoredRecord(seq, body.decode("utf-8", errors="replace"), check)
            for seq, check, body in self._records(run_id, after_seq)
        ]

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        """Bounded: one head read, then only the objects the head names for the range: loose
        records whole, a segment whole when it lies inside the range, else by two ranged GETs
        (its index line, then the bytes of the records wanted)."""
        records: list[tuple[int, str, bytes]] = []
        for _ in range(_CAS_ATTEMPTS):
            found = self._fetch_head(run_id)
            if found is None:
                return []
            head = found[0]
            spans = [s for s in head["segments"] if int(s[1]) > after_seq and int(s[0]) <= upto_seq]
            spans += [[seq, seq, name] for seq, name in head["tail"] if after_seq < int(seq) <= upto_seq]
            read = self.objects.parallel(lambda span: self._read_span(span, after_seq, upto_seq), spans)
            records = [r for part in read for r in part if after_seq < r[0] <= upto_seq]
            if all(check != MISSING for _, check, _ in records):
                break
            again = self._fetch_head(run_id)  # as in _records: packed or rewritten meanwhile?
            if again is None or again[1] == found[1]:
                break
        return [StoredRecord(seq, body.decode("utf-8", errors="replace"), check) for seq, check, body in records]

    def _read_span(self, span: Sequence[Any], after_seq: int, upto_seq: int) -> list[tuple[int, str, bytes]]:
        """The records of one object ([first, last, name]) that may lie in the range."""
        first, last, name = int(span[0]), int(span[1]), str(span[2])
        if after_seq < first and last <= upto_seq:
            return self._read_objects([span])
        missing = [(seq, MISSING, b"") for seq in range(max(first, after_seq + 1), min(last, upto_seq) + 1)]
        probe = self.objects.get_range(name, 0, _INDEX_PROBE - 1)
        if probe is None:
            return missing
        end = probe.find(b"\n")
        if end < 0:  # an index line longer than the probe (or damage): the whole object
            whole = self.objects.get(name)
            return unpack(whole[0], range(first, last + 1)) if whole is not None else missing
        try:
            index = [(int(seq), str(check), int(length)) for seq, check, length in json.loads(probe[:end])]
        except (ValueError, TypeError):
            return [(seq, "damaged", b"") for seq in range(first, last + 1)]
        wanted, offset = [], end + 1
        for seq, check, length in index:
            if after_seq < seq <= upto_seq:
                wanted.append((seq, check, offset, length))
            offset += length
        if not wanted:
            return []
        low, high = min(w[2] for w in wanted), max(w[2] + w[3] for w in wanted)
        data: bytes | None = probe[low:high] if high <= len(probe) else b""
        if high > len(probe) and high > low:
            data = self.objects.get_range(name, low, high - 1)
        if data is None:
            return missing
        return [(seq, check, data[at - low : at - low + length]) for seq, check, at, length in wanted]

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        """The flag is inside each body (objects keep seq, checksum, body): read back from
        ``upto_seq`` (default: the newest) a few records at a time with ``records_between``,
        until a snapshot. Costs the records since the previous snapshot (``snapshot_every``:
        50 by default) and a head read per step, not the run."""
        found = self._fetch_head(run_id)
        if found is None or int(found[0]["seq"]) == 0:
            return 0
        head = found[0]
        firsts = [int(s[0]) for s in head["segments"]] + [int(seq) for seq, _ in head["tail"]]
        lowest = min(firsts, default=1)
        top = int(head["seq"]) if upto_seq is None else min(upto_seq, int(head["seq"]))
        return newest_snapshot_between(self, run_id, lowest, top)

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return [StoredRecord(seq, body, check) for seq, check, body in self._records(run_id, 0)]

    def read_packed(self, run_id: str) -> PackedRecords | None:
        records = self._records(run_id, 0)
        if not records:
            return None
        index = [(seq, check, len(body)) for seq, check, body in records]
        return PackedRecords(b"[" + b",".join(body for _, _, body in records) + b"]", index)

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        found = self._fetch_head(run_id)
        if not self._check(found, expect_seq, fence):
            raise Refused
        entries = {entry.key: seal(entry) for save in saves for entry in save.ledger}
        self._settle(run_id, fence)  # the replaced run's own pending entries go to their objects first
        found = self._fetch_head(run_id)
        if not self._check(found, expect_seq, fence):
            raise Refused
        records = [(save.seq, save.checksum, save.body_bytes()) for save in saves]
        segment = [records[0][0], records[-1][0], self._write_loose(run_id, records, "seg")]
        old = found[0] if found is not None else empty_head()
        last = saves[-1]

        def change(head: Head) -> Head:
            summary = summary_json(last)
            pending = [sealed_json(sealed) for sealed in entries.values()]
            new = {**head, "seq": last.seq, "summary": summary, "segments": [segment], "tail": []}
            return {**new, "pending": pending, "pending_of": segment[2]}

        self._commit(run_id, expect_seq, fence, change, lambda head: head["segments"] == [segment])
        self.objects.parallel(self._put_entry_object, list(entries.values()))
        self._copied.add(str(segment[2]))
        self._loose.pop(run_id, None)
        stale = [str(span[2]) for span in old["segments"]] + [str(name) for _, name in old["tail"]]
        self.objects.delete(stale)  # no longer named by the head; readers of the old head retry

    def list_summaries(self) -> list[RunSummary]:
        run_ids = [name.split("/")[1] for name in self.objects.names("runs/", delimiter="/")]
        heads = self.objects.parallel(self._fetch_head, run_ids)
        summaries = []
        for run_id, found in zip(run_ids, heads, strict=True):
            if found is not None and found[0].get("summary") and int(found[0]["seq"]) > 0:
                s = found[0]["summary"]
                summaries.append(
                    RunSummary(
                        run_id, s["task"], s["phase"], s["turns"], s["tokens_used"], found[0]["seq"], s["updated_at"]
                    )
                )
        return summaries

    def remove_run(self, run_id: str) -> None:
        names = self.objects.names(f"runs/{run_id}/")
        # The head goes last: a run whose other objects are half deleted still reads as damaged.
        names.sort(key=lambda name: name.endswith("/head"))
        self.objects.delete([*names, *self._queue_names(run_id)])
        with self._lock:
            self._heads.pop(run_id, None)
            self._loose.pop(run_id, None)

    # ------------------------------------------------------------------ submissions

    def claim_in_one_step(
        self, owner: str, ttl: float, *, agent: str | None, limit: int, blocked: frozenset[str]
    ) -> list[ClaimedRun]:
        """``Store.claim_runnable``'s rule (``claimable``), a page of the queue at a time
        (``_s3_queue``), with the phase read from the same head version the compare-and-set
        replaces (so a run finishing meanwhile is never claimed again)."""
        claimed: list[ClaimedRun] = []
        for page in self.queue_from(None, CLAIM_PAGE):
            for queued, _ in page:
                if len(claimed) >= limit:
                    return claimed
                if agent is not None and queued.agent != agent:
                    continue
                found = self._fetch_head(queued.run_id)
                head = found[0] if found is not None else empty_head()
                now = self.lease_time()
                if (head["summary"] or {}).get("phase") in blocked:
                    continue
                if not claimable(self._as_run_head(head), now):
                    continue  # live, or its holder is alive on this host whatever the expiry says
                fence = next_fence(int(head["fence"]), self.store_time())
                new = {**head, "fence": fence, "owner": owner, "expires_at": now + ttl}
                if self._put_head(queued.run_id, new, found[1] if found is not None else None):
                    lease = Lease(queued.run_id, owner, fence, new["expires_at"], previous_fence=int(head["fence"]))
                    claimed.append(ClaimedRun(queued.run_id, queued.task, queued.agent, lease))
        return claimed

    def list_submissions(self) -> list[Submission]:
        names = self.objects.names("queue/")
        bodies = self.objects.parallel(self.objects.get, names)
        queued = [
            Submission(name.split("/", 1)[1], **json.loads(found[0]))
            for name, found in zip(names, bodies, strict=True)
            if found is not None
        ]
        return sorted(queued, key=lambda s: (s.submitted_at, s.run_id))


def _intact(run_id: str, records: Sequence[tuple[int, str, bytes]]) -> bool:
    """Every record's body matches its checksum, bound to the run or plain (a record read as
    damaged or missing does not; which rule a record must follow is the loader's to judge)."""
    seed = run_seed(run_id)
    return all(checksum(body, seed) == check or checksum(body) == check for _, check, body in records)


class S3Store(Store):
    """A run store in an S3 bucket: ``Store``'s rules over ``S3Backend``."""

    backend: S3Backend

    def __init__(self, url: str) -> None:
        super().__init__(S3Backend(url))


__all__ = ["MAX_SEGMENT", "PACK_EVERY", "S3Backend", "S3Store"]
