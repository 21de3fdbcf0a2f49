"""What the contract tests share: the data they save and a writer that saves it as the runner does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from ...codec import EncodedSave, Encoder
from ...state import LedgerEntry, RunState, idempotency_key
from ...stores.base import Store

BAD_RUN_IDS = ("../x", "/abs", "", "a\x00b", "x" * 201)
"""Run ids every store must refuse with ``InvalidRunId`` before touching anything."""

LONG_TTL = 60.0
SHORT_TTL = 0.2

# Messages in provider shapes, including a block type no provider has invented yet: stores must
# keep them exactly, in order (thinking signatures are sent back byte for byte).
MESSAGES: list[Any] = [
    {"role": "user", "content": "Book a table for two, tonight at 8."},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Check availability first.", "signature": "c2lnbmF0dXJl=="},
            {"type": "future_block_v9", "payload": {"nested": [1, 2.5, None, True, {"deep": ["x"]}]}},
            {"type": "text", "text": 'Checking\u2028now \n\t"quoted" \u00e9\u00e8 \U0001f37d'},
            {"type": "tool_use", "id": "toolu_1", "name": "find_table", "input": {"party": 2}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "table 7"}]},
    {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque+/=="}]},
    {"role": "assistant", "content": [{"type": "text", "text": ""}]},
]


class RunWriter:
    """Saves successive states of one run through ``store.append``, as the runner does."""

    def __init__(self, store: Store, run_id: str, *, task: str = "contract task", snapshot_every: int = 50) -> None:
        self.store = store
        self.state = RunState(run_id=run_id, task=task, created_at=1000.0, updated_at=1000.0)
        self.encoder = Encoder(snapshot_every=snapshot_every)

    def encode(
        self, label: str = "save", *, ledger: Sequence[LedgerEntry] = (), force_snapshot: bool = False
    ) -> EncodedSave:
        """The next save record, without writing it (``state.save_seq`` is advanced)."""
        self.state.save_seq += 1
        self.state.updated_at += 1.0
        return self.encoder.encode(self.state, label, ledger=ledger, force_snapshot=force_snapshot)

    def save(
        self,
        label: str = "save",
        *,
        fence: int | None = None,
        ledger: Sequence[LedgerEntry] = (),
        force_snapshot: bool = False,
    ) -> EncodedSave:
        encoded = self.encode(label, ledger=ledger, force_snapshot=force_snapshot)
        try:
            self.store.append(encoded, expect_seq=self.state.save_seq - 1, fence=fence)
        except BaseException:
            self.state.save_seq -= 1
            raise
        self.encoder.committed(self.state, encoded)
        return encoded

    def turn(self, step: int, *, fence: int | None = None) -> EncodedSave:
        """One turn's worth of change: a message, counters and business state, then a save."""
        self.state.messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {step}"}]})
        self.state.turns += 1
        self.state.tokens_used += 10 * step
        self.state.business_state[f"k{step % 3}"] = {"step": step, "items": list(range(step % 4))}
        self.state.usage = {"input_tokens": step, "output_tokens": 2 * step}
        return self.save(f"turn {step}", fence=fence)


def ledger_entry(run_id: str, call_id: str = "call_1", **changes: Any) -> LedgerEntry:
    """A pending ledger entry for ``call_id`` of run ``run_id``; keyword arguments override fields."""
    fields: dict[str, Any] = {
        "run_id": run_id,
        "key": idempotency_key(run_id, call_id),
        "call_id": call_id,
        "tool": "send_email",
        "args_hash": "a" * 64,
        "status": "pending",
        "attempts": 1,
        "result": None,
        "created_at": 1000.0,
        "updated_at": 1000.0,
    }
    fields.update(changes)
    return LedgerEntry(**fields)


def comparable(state: RunState) -> tuple[dict[str, Any], list[Any]]:
    """What a loaded state must match: every field but the run id, and the messages."""
    fields = state.small_fields()
    fields.pop("run_id")
    return fields, state.messages


_FROZEN_CHILD = (
    "import os, signal, sys\n"
    "from unbroken import owners\n"
    "sys.stdout.write(owners.make_owner() + '\\n'); sys.stdout.flush()\n"
    "os.kill(os.getpid(), signal.SIGSTOP)\n"
)


@contextlib.contextmanager
def frozen_process() -> Iterator[str]:
    """A real process of this host, frozen by SIGSTOP: yields the lease owner name it made for
    itself (``owners.make_owner``). It is killed and reaped on exit, so its name then names a
    process that is gone. Skips where a holder cannot be proven alive (no ``/proc``)."""
    if not os.path.exists("/proc/self/stat") or not hasattr(signal, "SIGSTOP"):
        pytest.skip("judging a lease holder alive on this host needs /proc and SIGSTOP")
    child = subprocess.Popen([sys.executable, "-c", _FROZEN_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        deadline = time.monotonic() + 30.0
        while _state(child.pid) != "T":  # until stopped: it may not have reached its SIGSTOP yet
            assert time.monotonic() < deadline, "the child never stopped"
            time.sleep(0.01)
        yield owner
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return text[text.rfind(")") + 2 :].split()[0]
