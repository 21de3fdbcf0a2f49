"""What a resume costs on the S3 store: requests and seconds, for runs of 1,000 and 10,000 turns.

Each run is written the way the engine writes it (two saves per turn, ~2.4 KB of messages per
turn, through ``Store.append``), so the bucket holds what a real run leaves: loose records
packed into segments every ``PACK_EVERY`` saves. The resume is timed in a fresh process (open
the store, load the run) and every HTTP request it makes is counted.

    python benchmarks/bench_s3_resume.py [--turns 1000,10000] [--endpoint URL]

Without ``--endpoint`` a moto server (``moto[server]``) is started on 127.0.0.1: an emulator in
one Python process, whose per-request latency (~5-15 ms here) is not a real service's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import workload
from unbroken.codec import Encoder
from unbroken.state import RunState
from unbroken.stores import open_store

RESUME = """
import json, sys, time
started = time.perf_counter()
from unbroken.stores import _s3_objects
requests = []
_s3_objects._session().events.register("before-send.s3", lambda **kw: requests.append(1))
from unbroken.stores import open_store
store = open_store(sys.argv[1])
opened = time.perf_counter()
state = store.load(sys.argv[2])
done = time.perf_counter()
print(json.dumps({"open_s": opened - started, "load_s": done - opened, "requests": len(requests),
                  "messages": len(state.messages)}))
"""


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto did not start")


def write_run(url: str, run_id: str, turns: int) -> float:
    """Write ``turns`` turns (two saves each) and return the median seconds per save."""
    store = open_store(url)
    state = RunState(run_id=run_id, task=workload.TASK)
    encoder = Encoder()
    samples = []
    for turn in range(1, turns + 1):
        for message in (workload.assistant_message(turn), workload.result_message(turn)):
            state.messages.append(message)
            state.turns = turn
            state.save_seq += 1
            started = time.perf_counter()
            encoded = encoder.encode(state, "model_turn" if message["role"] == "assistant" else "tools_done")
            store.append(encoded, expect_seq=state.save_seq - 1)
            encoder.committed(state, encoded)
            samples.append(time.perf_counter() - started)
    store.close()
    samples.sort()
    return samples[len(samples) // 2]


def resume(url: str, run_id: str, repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", RESUME, url, run_id], capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
    runs.sort(key=lambda r: r["open_s"] + r["load_s"])
    return dict(runs[len(runs) // 2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="1000,10000")
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        server, endpoint = start_moto()
    try:
        import boto3

        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        url = f"s3://{bucket}/bench?endpoint={endpoint}&region=us-east-1"
        print("| turns | saves | save (median) | resume requests | resume: open | resume: load | messages |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for turns in (int(t) for t in args.turns.split(",")):
            run_id = f"bench-{turns}"
            save_s = write_run(url, run_id, turns)
            figures = resume(url, run_id, args.repeats)
            print(
                f"| {turns:,} | {2 * turns:,} | {save_s * 1000:.1f} ms | {figures['requests']:.0f} | "
                f"{figures['open_s'] * 1000:.0f} ms | {figures['load_s'] * 1000:.0f} ms | {figures['messages']:,.0f} |",
                flush=True,
            )
    finally:
        if server is not None:
            server.kill()


if __name__ == "__main__":
    main()
