"""Checkpoint schema 1 against schema 2 on the workload: record bytes, encode and decode time.

    .venv/bin/python benchmarks/bench_format.py [turns ...]      (default: 1000 10000)

Both layouts are written by today's ``Encoder`` from the same states (a state at schema 1 is
still written in the schema 1 layout), save by save as the runner makes them (A: the assistant
message and its pending call, keyed as the engine keys it; B: the tool result), in alternating
rounds; each figure is the best round. Bytes are the record bodies against the history as compact
JSON; decode is ``codec.decode`` of all records against one stdlib ``json.loads`` of the history.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import orjson

import workload
from unbroken.codec import Encoder, StoredRecord, decode
from unbroken.model import add_usage
from unbroken.providers.scripted import ScriptedModel
from unbroken.state import RunState, ToolCall, ToolResult, occurrence_key

ROUNDS = 3


def write(turns: int, version: int) -> tuple[RunState, list[StoredRecord], float]:
    """The workload's saves at ``version``: (final state, records, seconds spent encoding)."""
    model = ScriptedModel([])
    encoder = Encoder(50, messages_are_json=True)
    state = RunState(
        run_id="bench", task=workload.TASK, messages=list(model.start_messages(workload.TASK)), schema_version=version
    )
    records: list[StoredRecord] = []
    spent = 0.0

    def save(label: str, force: bool = False) -> None:
        nonlocal spent
        state.save_seq += 1
        state.updated_at = 1796074474.66 + state.save_seq
        started = time.perf_counter()
        encoded = encoder.encode(state, label, force_snapshot=force)
        encoder.committed(state, encoded)
        spent += time.perf_counter() - started
        records.append(StoredRecord(encoded.seq, encoded.body, encoded.checksum))

    save("start", force=True)
    for turn in range(turns):
        usage = workload.usage(turn)
        state.turns += 1
        state.tokens_used += sum(usage.values())
        state.usage = add_usage(state.usage, usage)
        message = workload.assistant_message(turn)
        state.messages.append(message)
        call_id = workload.call_id(turn)
        key = occurrence_key(state.run_id, state.save_seq + 1, 0, call_id)
        call = ToolCall(call_id, workload.TOOL_NAME, dict(message["content"][1]["input"]), key)
        state.pending_calls, state.results, state.resolutions = [call], {}, {}
        state.phase = "running_tools"
        save("model_turn")
        result = ToolResult(call_id, workload.tool_result_text(turn))
        state.messages.extend(model.tool_result_messages([call], [result]))
        state.pending_calls, state.results = [], {}
        state.phase = "awaiting_model"
        save("tools_done")
    return state, records, spent


def measure(turns: int) -> None:
    history = orjson.dumps(workload.history(turns))
    best: dict[int, dict[str, float]] = {1: {}, 2: {}}
    loads_best = float("inf")
    for _ in range(ROUNDS):
        for version in (1, 2):
            gc.collect()
            state, records, spent = write(turns, version)
            started = time.perf_counter()
            decoded = decode("bench", records)
            took = time.perf_counter() - started
            assert decoded.state.messages == state.messages and decoded.state.small_fields() == state.small_fields()
            size = sum(len(record.body.encode() if isinstance(record.body, str) else record.body) for record in records)
            figures = {"ratio": size / len(history), "encode_us": spent / len(records) * 1e6, "decode": took}
            for name, value in figures.items():
                best[version][name] = min(best[version].get(name, value), value)
            del state, records, decoded
        started = time.perf_counter()
        json.loads(history)
        loads_best = min(loads_best, time.perf_counter() - started)
    print(f"{turns:,} turns: history {len(history):,} bytes, one stdlib json.loads {loads_best * 1000:.1f} ms")
    for version in (1, 2):
        row = best[version]
        print(
            f"  schema {version}: records/history {row['ratio']:.3f}   encode {row['encode_us']:.1f} us/save   "
            f"decode {row['decode'] * 1000:.1f} ms ({row['decode'] / loads_best:.2f}x json.loads)"
        )


def main() -> None:
    for turns in [int(arg) for arg in sys.argv[1:]] or [1000, 10_000]:
        measure(turns)


if __name__ == "__main__":
    main()
