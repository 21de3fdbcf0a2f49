"""What the write-time acceptance costs a save: ``codec.Encoder.encode`` with and without
``codec.accept_before_save``, in one process, in alternating rounds (so the machine's load hits
both alike), and ``acceptance.accept_fields`` alone.

    .venv/bin/python benchmarks/bench_accept.py [saves]      (default: 2000)

Each round encodes ``saves`` saves as the runner makes them (an assistant message a save, the
phase alternating, counters growing), with messages declared JSON (as the SDK adapters do).
"""

from __future__ import annotations

import statistics
import sys
import time
import timeit
from typing import Any

from unbroken import acceptance, codec
from unbroken.state import RunState, ToolCall

ROUNDS = 15


def encode_round(saves: int) -> float:
    """Microseconds a save, over ``saves`` saves of a fresh run."""
    state = RunState(run_id="bench", task="t", messages=[{"role": "user", "content": "x"}], usage={"input_tokens": 1})
    encoder = codec.Encoder(50, messages_are_json=True)
    started = time.perf_counter()
    for index in range(saves):
        state.save_seq += 1
        state.turns += 1
        state.tokens_used += 100
        state.messages.append({"role": "assistant", "content": [{"type": "text", "text": "hello " * 50}]})
        state.phase = "running_tools" if index % 2 else "awaiting_model"
        encoded = encoder.encode(state, "model_turn")
        encoder.committed(state, encoded)
    return (time.perf_counter() - started) / saves * 1e6


def main() -> None:
    saves = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    real = codec.accept_before_save

    def skip(fields: Any, state: Any) -> None:
        return None

    on: list[float] = []
    off: list[float] = []
    for _ in range(ROUNDS):
        codec.accept_before_save = real
        on.append(encode_round(saves))
        codec.accept_before_save = skip
        off.append(encode_round(saves))
    codec.accept_before_save = real
    print(f"encode with the write-time accept: best {min(on):.1f} us/save, median {statistics.median(on):.1f}")
    print(f"encode without it:                 best {min(off):.1f} us/save, median {statistics.median(off):.1f}")
    calls = [ToolCall(f"toolu_{n}", "search", {"q": n}, f"key-{n}") for n in range(2)]
    state = RunState(run_id="bench", task="t", messages=["m"] * 50, pending_calls=calls, usage={"input_tokens": 1})
    fields = state.small_fields()
    number = 100_000
    best = min(timeit.repeat(lambda: acceptance.accept_fields(fields), number=number, repeat=7))
    print(f"acceptance.accept_fields alone (two pending calls): {best / number * 1e6:.2f} us")


if __name__ == "__main__":
    main()
