"""The child ``record_power_loss_run`` starts: ``python -m faults_kit powerloss-child JSON``.

It runs the agent to completion with a ``PowerLossRecorder`` installed (on ``os.fsync`` for the
file store, through the preload hook for SQLite) and every store call that returned noted as
acknowledged, then writes the log."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ._fsync_hook import install_preload_hook
from ._recorder import PowerLossRecorder


def _powerloss_child(args: dict[str, Any]) -> None:
    from unbroken.agent_ref import load_agent
    from unbroken.stores import open_store
    from unbroken.testing.chaos import WORLD_ENV

    root = Path(args["root"])
    out = Path(args["out"])
    os.environ[WORLD_ENV] = args["world"]
    recorder = PowerLossRecorder(root, drop_sites=frozenset(args.get("drop_sites", [])))
    if args.get("preload"):
        install_preload_hook(recorder, Path(args["preload"]))
    else:
        recorder.install_python_fsync()
    store = open_store(args["url"])
    _acknowledge(store, recorder)
    agent = load_agent(args["agent"]).build(store)
    try:
        agent.run(args["task"], run_id=args["run_id"])
    finally:
        store.close()
        recorder.dump(out)


def _acknowledge(store: Any, recorder: PowerLossRecorder) -> None:
    """Note in the log every store call that returned (so was acknowledged to the caller)."""
    append, claim, put = store.append, store.ledger_claim, store.ledger_put

    def acked_append(save: Any, **kwargs: Any) -> None:
        append(save, **kwargs)
        recorder.acked(save.seq, [(entry.key, entry.updated_at) for entry in save.ledger])

    def acked_claim(entry: Any, **kwargs: Any) -> Any:
        stored, created = claim(entry, **kwargs)
        recorder.acked(None, [(stored.key, stored.updated_at)])
        return stored, created

    def acked_put(entry: Any, **kwargs: Any) -> None:
        put(entry, **kwargs)
        recorder.acked(None, [(entry.key, entry.updated_at)])

    store.append, store.ledger_claim, store.ledger_put = acked_append, acked_claim, acked_put


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "powerloss-child":
        _powerloss_child(json.loads(argv[1]))
        return 0
    print("usage: python -m faults_kit powerloss-child JSON", file=sys.stderr)
    return 2
