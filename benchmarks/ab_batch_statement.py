"""Group commit's batch as one statement against the pipeline, side by side in one process.

    python benchmarks/ab_batch_statement.py THREADS TURNS ROUNDS

A worker-shaped process: THREADS threads write the workload's turns (``writer.write_turns``)
through one PostgreSQL store (``pool_size=2``), ROUNDS times each way, the order swapped every
other round (``postgres._ONE_STATEMENT`` on, then off). Prints the medians of the client
process's CPU a save, its server backends' CPU a save, saves per second and saves per batch.
The server comes from ``UNBROKEN_TEST_POSTGRES_URL`` (default the local ``test`` database).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import writer
from unbroken.stores import open_store, postgres

SERVER = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"


def main(threads: int, turns: int, rounds: int) -> None:
    schema, name = f"ab_{uuid.uuid4().hex[:8]}", f"ab{os.getpid()}"
    store = open_store(f"{SERVER}?schema={schema}&pool_size=2&application_name={name}")
    admin = psycopg.connect(SERVER, autocommit=True)

    def server_cpu() -> float:
        ticks = 0
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        for (pid,) in rows.fetchall():
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    writer.write_turns(store, "warm", 5)
    results: dict[bool, list[tuple[float, float, float, float]]] = {True: [], False: []}
    for index in range(rounds):
        for on in (True, False) if index % 2 == 0 else (False, True):
            postgres._ONE_STATEMENT = on
            saves = [0] * threads

            def run(i: int, saves: list[int] = saves) -> None:
                saves[i] = writer.write_turns(store, f"r{i}", turns)

            group = store.backend._group_commit()  # type: ignore[attr-defined]
            batches = group.batches
            workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            server, client, wall = server_cpu(), time.process_time(), time.time()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            client, server, wall = time.process_time() - client, server_cpu() - server, time.time() - wall
            n = sum(saves)
            results[on].append((1e6 * client / n, 1e6 * server / n, n / wall, n / (group.batches - batches)))
    for on in (True, False):
        rows = results[on]
        medians = [statistics.median(row[i] for row in rows) for i in range(4)]
        print(
            f"{'one statement' if on else 'pipeline     '}: client {medians[0]:.0f} us/save, server {medians[1]:.0f} "
            f"us/save, {medians[2]:,.0f} saves/s, {medians[3]:.2f} saves/batch"
        )
    store.close()
    admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:4]))
