"""A process whose threads save their own runs at once, for the group-commit crash test.

    python group_commit_child.py URL THREADS SAVES

Each thread appends ``SAVES`` save points to its run ``gc-<i>`` (the first creates it), and
after each append returns writes ``run_id seq`` to stdout with one ``os.write`` (a SIGKILL never
leaves half a line): the acknowledged saves. Armed with ``UNBROKEN_CRASH_AT`` by the test.
"""

from __future__ import annotations

import os
import sys
import threading

from unbroken.codec import encode_full
from unbroken.state import RunState
from unbroken.stores.postgres import PostgresStore


def main(url: str, threads: int, saves: int) -> None:
    store = PostgresStore(url)
    start = threading.Barrier(threads)

    def run(index: int) -> None:
        run_id = f"gc-{index}"
        start.wait()
        for seq in range(1, saves + 1):
            state = RunState(run_id=run_id, task="t", save_seq=seq, turns=seq)
            store.append(encode_full(state, "step"), expect_seq=seq - 1)
            os.write(1, f"{run_id} {seq}\n".encode())

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
