"""A fake external service that counts what it is asked to do, per idempotency key, on disk.

Every request is one JSON line appended to a file under an exclusive ``flock``, so several
processes (and threads) see one consistent log, and a request that returned survives the
caller being SIGKILLed (the kernel keeps the written page). Three endpoints mirror the three
tool classes of the crash tests:

* ``read``: a read; nothing changes.
* ``put``: an idempotent write; a repeated idempotency key is acknowledged, not applied again.
* ``send``: a plain mailer with no deduplication; every request sends an email. Its outbox can
  be searched by idempotency key (what a probe does).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any


class CountingService:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _locked(self, request: dict[str, Any], dedupe: bool) -> dict[str, Any]:
        with open(self.path, "a+", encoding="utf-8") as log:
            fcntl.flock(log, fcntl.LOCK_EX)
            try:
                log.seek(0)
                earlier = [json.loads(line) for line in log if line.strip()]
                first = next(
                    (
                        row
                        for row in earlier
                        if row["applied"] and row["endpoint"] == request["endpoint"] and row["key"] == request["key"]
                    ),
                    None,
                )
                applied = not (dedupe and first is not None)
                line = {**request, "applied": applied, "pid": os.getpid(), "n": len(earlier) + 1}
                log.write(json.dumps(line) + "\n")
                log.flush()
                return line if first is None or applied else first
            finally:
                fcntl.flock(log, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ endpoints

    def read(self, name: str) -> str:
        self._locked({"endpoint": "read", "key": None, "body": name}, dedupe=False)
        return f"contents of {name}"

    def put(self, idempotency_key: str, name: str, body: str) -> str:
        row = self._locked({"endpoint": "put", "key": idempotency_key, "body": f"{name}={body}"}, dedupe=True)
        return f"stored {name} (version {row['n']})"

    def send(self, idempotency_key: str, to: str, subject: str) -> str:
        row = self._locked({"endpoint": "send", "key": idempotency_key, "body": f"{to}:{subject}"}, dedupe=False)
        return f"sent message {row['n']} to {to}"

    def find_sent(self, idempotency_key: str | None) -> str | None:
        """What ``send`` returned for this key, if an email with it is in the outbox."""
        for row in self.rows():
            if row["endpoint"] == "send" and row["key"] == idempotency_key:
                return f"sent message {row['n']} to {row['body'].split(':', 1)[0]}"
        return None

    # ------------------------------------------------------------------ counting

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as log:
            fcntl.flock(log, fcntl.LOCK_SH)
            try:
                return [json.loads(line) for line in log if line.strip()]
            finally:
                fcntl.flock(log, fcntl.LOCK_UN)

    def requests(self, endpoint: str) -> Counter[str | None]:
        """How many times each key was sent to ``endpoint`` (applied or not)."""
        return Counter(row["key"] for row in self.rows() if row["endpoint"] == endpoint)

    def effects(self, endpoint: str) -> Counter[str | None]:
        """How many times each key actually changed something at ``endpoint``."""
        return Counter(row["key"] for row in self.rows() if row["endpoint"] == endpoint and row["applied"])
