"""Rewrite the golden records (tests/golden/run-1/). Run it only for a deliberate format change:

    .venv/bin/python tests/golden/regenerate.py

It plays one small run through every kind of change a save can hold (new messages, changed
fields, a snapshot every 3 records, a boundary snapshot, compaction, awkward text and numbers),
encodes each save point with the current ``Encoder`` and writes the exact bytes. Review the diff:
a change to these files is a change to the on-disk format (docs/format.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from unbroken.codec import Encoder
from unbroken.state import RunState, ToolCall, ToolResult

HERE = Path(__file__).resolve().parent / "run-1"
SNAPSHOT_EVERY = 3
T0 = 1764500000.125


def states() -> list[tuple[str, RunState]]:
    """The save points of the golden run, in order, as (label, state) pairs."""
    out: list[tuple[str, RunState]] = []
    state = RunState(
        run_id="golden-1",
        task='Résumé the tickets — "quoted", back\\slash, tab\t, newline\n, bell\u0007, emoji 🦀',
        messages=[{"role": "user", "content": "Résumé the tickets"}],
        business_state={"counts": {"refund": 0}, "ratio": 0.1, "tiny": 1e-07, "big": 1e16, "neg": -0.0},
        created_at=T0,
        updated_at=T0,
    )

    def save(label: str) -> None:
        state.save_seq += 1
        state.updated_at = T0 + state.save_seq * 0.5
        snapshot = json.loads(json.dumps(state.small_fields()))
        out.append((label, RunState.from_parts(snapshot, json.loads(json.dumps(state.messages)))))

    save("start")
    for turn in range(3):
        call = ToolCall(f"toolu_{turn}", "read_ticket", {"id": 2**63 - 1 - turn, "n": -(2**63)}, f"key-{turn}")
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
        state.pending_calls, state.results, state.phase = [call], {}, "running_tools"
        save("model_turn")
        state.results = {call.id: ToolResult(call.id, f"ticket {turn}: refund")}
        state.business_state["counts"]["refund"] += 1
        state.messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "refund"}]}
        )
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
    HERE.mkdir(exist_ok=True)
    encoder = Encoder(SNAPSHOT_EVERY)
    bodies, index = [], []
    for label, state in states():
        encoded = encoder.encode(state, label)
        encoder.committed(state, encoded)
        bodies.append(encoded.body)
        index.append(f"{encoded.seq} {encoded.checksum} {'snapshot' if encoded.snapshot else 'delta'} {label}")
    (HERE / "records.jsonl").write_text("".join(body + "\n" for body in bodies), encoding="utf-8")
    (HERE / "index.txt").write_text("".join(line + "\n" for line in index), encoding="utf-8")
    final = states()[-1][1]
    expected = {"fields": final.small_fields(), "messages": final.messages}
    (HERE / "state.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
