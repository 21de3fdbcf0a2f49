"""One LangGraph thread's log, indexed in memory: checkpoints by namespace and id, channel
versions, pending writes. Kept in step with the log, including other processes' appends."""

from __future__ import annotations

import json
import threading
from typing import Any

from ..state import JSONValue
from ._runlog import RunLog


def version_key(version: Any) -> str:
    """A dict key for a channel version (int, float or str), distinct across those types."""
    kind = type(version)
    if kind is int:
        return str(version)
    if kind is str:
        return f"s:{version}"
    return json.dumps(version)


class Thread:
    """The in-memory index of one thread's log, kept in step with it."""

    def __init__(self, log: RunLog) -> None:
        self.log = log
        self.lock = threading.RLock()
        self._generation = -1
        self._indexed = 0
        self.checkpoints: dict[str, dict[str, dict[str, Any]]] = {}
        self.blobs: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, JSONValue, str, int]]] = {}
        # The newest list value stored per (ns, channel): its version, a copy decoded from what
        # was written, and the caller's items themselves, so that the next put can store only
        # what was appended (same items: an identity check; else an equality check).
        self.last_list: dict[tuple[str, str], tuple[Any, list[Any], list[Any]]] = {}

    def sync(self) -> None:
        """Catch up with the log (and with other processes' appends)."""
        self.log.refresh_if_changed()
        if self.log.generation != self._generation:
            self._generation = self.log.generation
            self._indexed = 0
            self.checkpoints, self.blobs, self.writes, self.last_list = {}, {}, {}, {}
        items = self.log.items()
        for item in items[self._indexed :]:
            self.index(item)
        self._indexed = len(items)

    def index(self, item: dict[str, Any]) -> None:
        ns = item["ns"]
        if item["k"] == "cp":
            self.checkpoints.setdefault(ns, {})[item["id"]] = item
            for channel, blob in item["blobs"].items():
                self.blobs[(ns, channel, version_key(blob["v"]))] = blob
        elif item["k"] == "w":
            pending = self.writes.setdefault((ns, item["cp"]), {})
            for idx, channel, value in item["writes"]:
                pending[(item["task"], idx)] = (item["task"], channel, value, item["path"], idx)
        elif item["k"] == "blobs":  # kept from deleted checkpoints because survivors read them
            for channel, blob in item["blobs"].items():
                self.blobs[(ns, channel, version_key(blob["v"]))] = blob

    def without(self, doomed: set[tuple[str, str]]) -> list[dict[str, Any]]:
        """The log's items less the ``doomed`` (namespace, checkpoint id) checkpoints and their
        writes. A blob a surviving checkpoint still reads, directly or as the base of a list
        that was appended to, is kept; every other blob of a doomed checkpoint goes."""
        needed: set[tuple[str, str, str]] = set()
        for ns, checkpoints in self.checkpoints.items():
            for checkpoint_id, item in checkpoints.items():
                if (ns, checkpoint_id) in doomed:
                    continue
                for channel, version in item["checkpoint"].get("channel_versions", {}).items():
                    key = (ns, channel, version_key(version))
                    while key in self.blobs and key not in needed:
                        needed.add(key)
                        blob = self.blobs[key]
                        if "base" not in blob:
                            break
                        key = (ns, channel, version_key(blob["base"]))
        kept: list[dict[str, Any]] = []
        for item in self.log.items():
            ns = item["ns"]
            if item["k"] == "w":
                if (ns, item["cp"]) not in doomed:
                    kept.append(item)
            elif item["k"] == "cp" and (ns, item["id"]) not in doomed:
                kept.append(item)
            else:
                blobs = {ch: b for ch, b in item["blobs"].items() if (ns, ch, version_key(b["v"])) in needed}
                if blobs:
                    kept.append({"k": "blobs", "ns": ns, "blobs": blobs})
        return kept

    def append(self, item: dict[str, Any], head: dict[str, JSONValue] | None = None) -> None:
        self.log.append([item], head)
        self._indexed += 1
        self.index(item)

    def latest_id(self, ns: str) -> str | None:
        ids = self.checkpoints.get(ns)
        return max(ids) if ids else None
