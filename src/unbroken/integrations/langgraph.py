"""A LangGraph checkpointer on unbroken's stores (``pip install unbroken[langgraph]``).

::

    saver = UnbrokenSaver(open_store("sqlite:///graph.db"))   # or postgresql://..., memory://
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})

Each thread is one unbroken log; every ``put`` and ``put_writes`` is one atomic, durable
append of what is new:

* only the channels named in ``new_versions`` are written (the others are found at the
  version the checkpoint names);
* a list channel that grew by appending (a message history) is written as the new items
  plus a reference to the version it extends, so the bytes written per step do not grow with
  the history (LangGraph's own savers write the whole list again at every step);
* values are plain JSON where they can be, and otherwise LangGraph's serializer in its strict
  msgpack mode (see ``_lgvalues``): loading never unpickles and never builds a type outside
  LangGraph's safe allowlist plus ``allowed_types``.

Sync and async methods share one implementation (the async ones run it in a worker thread).
"""

from __future__ import annotations

import copy
import itertools
import operator
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)

from ..errors import ConfigError
from ..stores.base import Store
from ..stores.offload import off_loop
from . import _lgtools
from ._effects import current_call
from ._lgthread import Thread, version_key
from ._lgtools import DurableToolCalls, durable_tool_node
from ._lgvalues import ValueCodec
from ._runlog import RunLog, list_logs, log_id

LOG_PREFIX = _lgtools.LOG_PREFIX


class UnbrokenSaver(BaseCheckpointSaver[int]):
    """LangGraph's ``BaseCheckpointSaver`` (sync and async) on an unbroken ``Store``.

    A ``put`` or ``put_writes`` is durable when it returns, at the store's durability. Several
    processes may share one store: each write is conditional on the thread's last position
    and a reader picks up other processes' writes. ``allowed_types`` extends the types that
    may be rebuilt from stored non-JSON values (module and class name tuples, or classes)."""

    def __init__(self, store: Store, *, allowed_types: Iterable[tuple[str, ...] | type] = ()) -> None:
        super().__init__()
        self.store = store
        self.values = ValueCodec(allowed_types)
        self._threads: dict[str, Thread] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ threads

    def _thread(self, thread_id: str) -> Thread:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                log = RunLog(self.store, log_id(LOG_PREFIX, str(thread_id)), kind="langgraph-thread")
                thread = self._threads[thread_id] = Thread(log)
            return thread

    def _thread_ids(self) -> list[str]:
        ids = []
        for run_id in list_logs(self.store, LOG_PREFIX):
            head = RunLog(self.store, run_id, kind="langgraph-thread").head()
            if isinstance(head.get("thread_id"), str):
                ids.append(head["thread_id"])
        return sorted(ids)

    # ------------------------------------------------------------------ writing

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint: durable when it returns."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "") or ""
        thread = self._thread(thread_id)
        with thread.lock:
            thread.sync()
            rest = {key: value for key, value in checkpoint.items() if key != "channel_values"}
            values = checkpoint["channel_values"]
            parent = thread.checkpoints.get(ns, {}).get(configurable.get("checkpoint_id") or "")
            blobs = {
                channel: self._blob(thread, ns, channel, version, values, parent)
                for channel, version in new_versions.items()
            }
            item = {
                "k": "cp",
                "ns": ns,
                "id": checkpoint["id"],
                "parent": configurable.get("checkpoint_id"),
                "checkpoint": self.values.encode(rest),
                "metadata": self.values.encode(get_serializable_checkpoint_metadata(config, metadata)),
                "blobs": blobs,
            }
            head = None if thread.log.exists() else {"thread_id": thread_id}
            thread.append(item, head)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _blob(
        self,
        thread: Thread,
        ns: str,
        channel: str,
        version: Any,
        values: Mapping[str, Any],
        parent: dict[str, Any] | None,
    ) -> dict[str, Any]:
        if channel not in values:
            return {"v": version, "empty": True}
        value = values[channel]
        previous = thread.last_list.get((ns, channel))
        if previous is None and type(value) is list and parent is not None:
            previous = self._parent_list(thread, ns, channel, parent)
        if type(value) is list and previous is not None:
            base_version, base, originals = previous
            size = len(base)
            if len(value) >= size and (
                (len(originals) == size and all(map(operator.is_, itertools.islice(value, size), originals)))
                or value[:size] == base
            ):
                added = [self.values.encode(item) for item in value[size:]]
                thread.last_list[(ns, channel)] = (version, base + self.values.decode(added), list(value))
                return {"v": version, "base": base_version, "items": added}
        encoded = self.values.encode(value)
        if type(value) is list:
            thread.last_list[(ns, channel)] = (version, self.values.decode(encoded), list(value))
        return {"v": version, "value": encoded}

    def _parent_list(
        self, thread: Thread, ns: str, channel: str, parent: dict[str, Any]
    ) -> tuple[Any, list[Any], list[Any]] | None:
        """The parent checkpoint's value of a list channel (first put of a process)."""
        version = parent["checkpoint"].get("channel_versions", {}).get(channel)
        blob = thread.blobs.get((ns, channel, version_key(version))) if version is not None else None
        if blob is None or blob.get("empty"):
            return None
        value = self._value(thread, ns, channel, blob)
        return (version, value, []) if type(value) is list else None

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Save a task's writes for a checkpoint: durable when it returns; a write already
        saved for the same task and index is not written again."""
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "") or ""
        checkpoint_id = configurable["checkpoint_id"]
        thread = self._thread(str(configurable["thread_id"]))
        with thread.lock:
            thread.sync()
            saved = thread.writes.get((ns, checkpoint_id), {})
            entries = []
            for position, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, position)
                if idx >= 0 and (task_id, idx) in saved:
                    continue
                entries.append([idx, channel, self.values.encode(value)])
            if entries:
                item = {"k": "w", "ns": ns, "cp": checkpoint_id, "task": task_id, "path": task_path, "writes": entries}
                head = None if thread.log.exists() else {"thread_id": str(configurable["thread_id"])}
                thread.append(item, head)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread. Safe to call twice."""
        thread = self._thread(str(thread_id))
        with thread.lock:
            thread.log.delete()
        with self._lock:
            self._threads.pop(str(thread_id), None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete, in every thread, the checkpoints (and their writes) whose metadata names
        one of ``run_ids``; each thread is rewritten atomically."""
        doomed_runs = set(run_ids)

        def of_those_runs(thread: Thread, ns: str, item: dict[str, Any]) -> bool:
            return self.values.decode(item["metadata"]).get("run_id") in doomed_runs

        for thread_id in self._thread_ids():
            self._remove(thread_id, of_those_runs)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's newest checkpoint (and its writes);
        ``delete``: delete the threads. Each thread is rewritten atomically."""
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")

        def not_latest(thread: Thread, ns: str, item: dict[str, Any]) -> bool:
            return bool(item["id"] != max(thread.checkpoints[ns]))

        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._remove(str(thread_id), not_latest)

    def _remove(self, thread_id: str, doomed: Callable[[Thread, str, dict[str, Any]], bool]) -> None:
        thread = self._thread(thread_id)
        with thread.lock:
            thread.sync()
            chosen = {
                (ns, checkpoint_id)
                for ns, checkpoints in thread.checkpoints.items()
                for checkpoint_id, item in checkpoints.items()
                if doomed(thread, ns, item)
            }
            if not chosen:
                return
            kept = thread.without(chosen)
            if any(item["k"] == "cp" for item in kept):
                thread.log.rewrite(kept, dict(thread.log.head()))
            else:
                thread.log.delete()
            thread.sync()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another, in one atomic append
        (a fork). Copying a thread that does not exist does nothing."""
        source = self._thread(str(source_thread_id))
        with source.lock:
            source.sync()
            items = copy.deepcopy(source.log.items())
        if not items:
            return
        target = self._thread(str(target_thread_id))
        with target.lock:
            target.sync()
            head = None if target.log.exists() else {"thread_id": str(target_thread_id)}
            target.log.append(items, head)
            target.sync()

    # ------------------------------------------------------------------ reading

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's latest in its namespace when no
        ``checkpoint_id`` is given), or None."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "") or ""
        thread = self._thread(thread_id)
        with thread.lock:
            thread.sync()
            checkpoint_id = get_checkpoint_id(config) or thread.latest_id(ns)
            item = thread.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else None
            return self._tuple(thread, thread_id, item) if item is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first, of one thread (or of all), optionally of one namespace,
        whose metadata holds every ``filter`` pair, older than ``before``, at most ``limit``
        (``limit`` 0 or less: none, as LangGraph's own savers)."""
        if limit is not None and limit <= 0:
            return
        configurable = (config or {}).get("configurable", {})
        thread_ids = [str(configurable["thread_id"])] if configurable.get("thread_id") is not None else None
        wanted_ns = configurable.get("checkpoint_ns")
        wanted_id = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        found: list[CheckpointTuple] = []
        for thread_id in thread_ids if thread_ids is not None else self._thread_ids():
            thread = self._thread(thread_id)
            with thread.lock:
                thread.sync()
                for ns, checkpoints in thread.checkpoints.items():
                    if wanted_ns is not None and ns != wanted_ns:
                        continue
                    for checkpoint_id in sorted(checkpoints, reverse=True):
                        if wanted_id is not None and checkpoint_id != wanted_id:
                            continue
                        if before_id is not None and checkpoint_id >= before_id:
                            continue
                        item = checkpoints[checkpoint_id]
                        if filter:
                            metadata = self.values.decode(item["metadata"])
                            if any(key not in metadata or metadata[key] != value for key, value in filter.items()):
                                continue
                        found.append(self._tuple(thread, thread_id, item))
                        if limit is not None and len(found) >= limit:
                            yield from found
                            return
        yield from found

    def _tuple(self, thread: Thread, thread_id: str, item: dict[str, Any]) -> CheckpointTuple:
        ns, checkpoint_id = item["ns"], item["id"]
        checkpoint = self.values.decode(item["checkpoint"])
        values = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            blob = thread.blobs.get((ns, channel, version_key(version)))
            if blob is not None and not blob.get("empty"):
                values[channel] = self._value(thread, ns, channel, blob)
        checkpoint["channel_values"] = values
        writes = sorted(
            thread.writes.get((ns, checkpoint_id), {}).values(), key=lambda w: writes_sort_key(w[3], w[0], w[4])
        )
        parent = item["parent"]
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,
            metadata=self.values.decode(item["metadata"]),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=[(task, channel, self.values.decode(value)) for task, channel, value, _, _ in writes],
        )

    def _value(self, thread: Thread, ns: str, channel: str, blob: dict[str, Any]) -> Any:
        """A channel value, following the chain of appended-to lists back to a whole one."""
        segments = []
        while "base" in blob:
            segments.append(blob["items"])
            base = thread.blobs.get((ns, channel, version_key(blob["base"])))
            if base is None:
                raise ValueError(f"channel {channel!r}: the version {blob['base']!r} it extends is missing")
            blob = base
        if not segments:
            return self.values.decode(blob["value"])
        encoded = [*blob["value"]]
        for added in reversed(segments):
            encoded.extend(added)
        return self.values.decode(encoded)

    # ------------------------------------------------------------------ async twins

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await off_loop(self.store, self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await off_loop(self.store, lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await off_loop(self.store, self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await off_loop(self.store, self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await off_loop(self.store, self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await off_loop(self.store, self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await off_loop(self.store, self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await off_loop(self.store, lambda: self.prune(thread_ids, strategy=strategy))


__all__ = ["DurableToolCalls", "UnbrokenSaver", "current_call", "durable_tool_node"]
