"""Servers the store benchmarks start for themselves: a ``redis-server`` with the append-only file
synced on every write (what ``durability=full`` needs, so the row compares with SQLite full), and
a moto S3 server (an emulator: its latency is not a real service's). One of each per process,
stopped at exit; each benchmark directory gets its own key prefix."""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start on port {port}")


def _prefix(directory: Path) -> str:
    return "bench-" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]


@functools.cache
def _redis_server() -> int:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
    port, data = _free_port(), tempfile.mkdtemp(prefix="unbroken-bench-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", data, "--save", ""]
    command += ["--appendonly", "yes", "--appendfsync", "always"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(lambda: (process.kill(), shutil.rmtree(data, ignore_errors=True)))
    _wait(port, process, "redis-server")
    return port


@functools.cache
def _moto_server() -> str:
    port = _free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(process.kill)
    _wait(port, process, "moto.server")
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # moto takes any; children inherit them
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    return endpoint


def redis_url(directory: Path) -> str:
    return f"redis://127.0.0.1:{_redis_server()}/0?durability=full&prefix={_prefix(directory)}"


def s3_url(directory: Path) -> str:
    return f"s3://bench/{_prefix(directory)}?endpoint={_moto_server()}&region=us-east-1"
