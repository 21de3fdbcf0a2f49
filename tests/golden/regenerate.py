"""Rewrite the golden records (tests/golden/run-*/). Run it only for a deliberate format change:

    .venv/bin/python tests/golden/regenerate.py

It plays one small run through every kind of change a save can hold (new messages, changed
fields, a snapshot every 3 records, a boundary snapshot, compaction, awkward text and numbers),
encodes each save point with the current ``Encoder`` and writes the exact bytes, once per format:

- ``run-1``: checkpoint schema 1 (the ``Encoder`` still writes it for a state at schema 1); these
  bytes must never change: runs saved by older versions hold them;
- ``run-2``: schema 2 (today's), with calls keyed as the engine keys them (``occurrence_key``) so
  that keys and tool inputs are left out where the format allows;
- ``run-mixed``: a schema 1 run resumed by a schema 2 writer (records 1-5 at 1, the rest at 2).

Review the diff: a change to these files is a change to the on-disk format (docs/format.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

from unbroken import acceptance
from unbroken.codec import Encoder, StoredRecord, pack_records
from unbroken.state import RunState, ToolCall, ToolResult, occurrence_key

GOLDEN = Path(__file__).resolve().parent
RUNS = {"run-1": (1, 1), "run-2": (2, 2), "run-mixed": (1, 2)}
"""Each golden run: (schema of its first 5 records, schema of the rest)."""
SWITCH_AT = 6
SNAPSHOT_EVERY = 3
T0 = 1764500000.125


def states(name: str = "run-1") -> list[tuple[str, RunState]]:
    """The save points of a golden run, in order, as (label, state) pairs."""
    first, then = RUNS[name]
    out: list[tuple[str, RunState]] = []
    state = RunState(
        run_id="golden-1",
        schema_version=first,
        task='Résumé the tickets — "quoted", back\\slash, tab\t, newline\n, bell\u0007, emoji 🦀',
        messages=[{"role": "user", "content": "Résumé the tickets"}],
        business_state={"counts": {"refund": 0}, "ratio": 0.1, "tiny": 1e-07, "big": 1e16, "neg": -0.0},
        created_at=T0,
        updated_at=T0,
    )

    def save(label: str) -> None:
        state.save_seq += 1
        state.updated_at = T0 + state.save_seq * 0.5
        if state.save_seq == SWITCH_AT:
            state.schema_version = then
        snapshot = json.loads(json.dumps(state.small_fields()))
        out.append((label, RunState.from_parts(snapshot, json.loads(json.dumps(state.messages)))))

    save("start")
    for turn in range(3):
        key = f"key-{turn}" if name == "run-1" else occurrence_key(state.run_id, state.save_seq + 1, 0, f"toolu_{turn}")
        call = ToolCall(f"toolu_{turn}", "read_ticket", {"id": 2**63 - 1 - turn, "n": -(2**63)}, key)
        state.turns += 1
        state.tokens_used += 1234
        state.usage = {"input_tokens": 1000 + turn, "output_tokens": 234}
        state.messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Turn {turn}: ünïcode ✓ \u2028 line sep"},
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
                ],
            }
        )
        calls = [call]
        if name != "run-1" and turn == 2:  # a malformed call beside it (kept whole) and a repaired one
            bad = ToolCall("toolu_b", "nope", {}, occurrence_key(state.run_id, state.save_seq + 1, 1, "toolu_b"))
            bad.error = "there is no tool named 'nope'"
            old = ToolCall("toolu_0", "read_ticket", {"id": 1.0, "n": True}, "key-from-an-earlier-save")
            calls += [bad, old]
            state.messages[-1]["content"].append({"type": "tool_use", "id": "toolu_b", "name": "nope", "input": {}})
            state.messages[-1]["content"].append(
                {"type": "tool_use", "id": "toolu_c", "name": "other", "input": {"id": 1, "n": 1}}
            )
        state.pending_calls, state.results, state.phase = calls, {}, "running_tools"
        save("model_turn")
        state.results = {call.id: ToolResult(call.id, f"ticket {turn}: refund")}
        state.business_state["counts"]["refund"] += 1
        answers = [{"type": "tool_result", "tool_use_id": each.id, "content": "refund"} for each in calls]
        state.messages.append({"role": "user", "content": answers})
        if turn >= 1 and state.schema_version >= 2 and not state.history_checked:
            state.history_checked = 3  # (a schema 1 writer never wrote it)
        state.pending_calls, state.results, state.phase = [], {}, "awaiting_model"
        save("tools_done")
    state.summary, state.summary_upto = "Read 2 tickets: both refunds.", 5
    save("compacted")
    state.turns += 1
    state.messages.append({"role": "assistant", "content": [{"type": "text", "text": "Done: 3 refunds."}]})
    state.phase, state.output = "completed", "Done: 3 refunds."
    save("completed")
    return out


def main() -> None:
    for name in RUNS:
        here = GOLDEN / name
        here.mkdir(exist_ok=True)
        encoder = Encoder(SNAPSHOT_EVERY)
        bodies, index = [], []
        played = states(name)
        for label, state in played:
            encoded = encoder.encode(state, label)
            encoder.committed(state, encoded)
            bodies.append(encoded.body_bytes().decode())
            index.append(f"{encoded.seq} {encoded.checksum} {'snapshot' if encoded.snapshot else 'delta'} {label}")
        (here / "records.jsonl").write_text("".join(body + "\n" for body in bodies), encoding="utf-8")
        (here / "index.txt").write_text("".join(line + "\n" for line in index), encoding="utf-8")
        final = played[-1][1]
        expected = {"fields": final.small_fields(), "messages": final.messages}
        (here / "state.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        if name == "run-2":
            write_segment(
                GOLDEN / "segment-2",
                [
                    StoredRecord(seq, body.encode(), line.split()[1])
                    for seq, (body, line) in enumerate(zip(bodies, index, strict=True), start=1)
                ],
            )


def write_segment(here: Path, records: list[StoredRecord]) -> None:
    """``segment-2``: run-2's records packed into one segment (docs/format.md, "Segments")."""
    packed = pack_records("golden-1", records)
    assert packed is not None
    segment, _ = packed
    here.mkdir(exist_ok=True)
    (here / "index.json").write_bytes(segment.index_text + b"\n")
    (here / "bodies.json").write_bytes(segment.bodies + b"\n")
    (here / "seal.txt").write_text(f"{segment.first} {segment.last} {segment.seal}\n", encoding="ascii")


if __name__ == "__main__":
    # The golden runs are records as written before runs were bound (plain CRC-32s, a seal from
    # seed 0), which every version must keep reading; test_golden_records pins the binding.
    with mock.patch.object(acceptance, "_BIND_RECORDS", False):
        main()
