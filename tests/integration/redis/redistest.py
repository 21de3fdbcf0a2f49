"""A pytest plugin for tests against a real ``redis-server``.

Two kinds of server:

* the shared one (``UNBROKEN_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``), for tests
  that need a server but not its disk: each test gets a key prefix of its own, deleted after it;
* a private ``redis-server`` this plugin starts with the append-only file synced on every write
  (``--appendonly yes --appendfsync always``) in a temporary directory, on a free port, for the
  tests that prove durability: it can be SIGKILLed and restarted on the same files.

When a server cannot be had, the tests are skipped with the reason, unless the ``CI`` environment
variable is set: then they fail, so CI never passes without running them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

URL_ENV_VAR = "UNBROKEN_TEST_REDIS_URL"
DEFAULT_URL = "redis://127.0.0.1:6379/0"


def server_url() -> str:
    return os.environ.get(URL_ENV_VAR) or DEFAULT_URL


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so Redis tests must run)")
    pytest.skip(reason)


@functools.cache
def unreachable_reason() -> str | None:
    try:
        client = redis.Redis.from_url(server_url(), socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        return f"Redis at {server_url()} is unreachable ({exc}); set {URL_ENV_VAR}"
    return None


def require_server() -> None:
    """Skip (or, with CI set, fail) the calling test when the shared server cannot be reached."""
    reason = unreachable_reason()
    if reason is not None:
        _skip_or_fail(reason)


def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on the server at ``url``."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


def store_url(server: str, prefix: str, durability: str = "none") -> str:
    separator = "&" if "?" in server else "?"
    return f"{server}{separator}prefix={prefix}&durability={durability}"


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A store URL on the shared server, under a key prefix of this test's own (no durability
    is claimed: the shared server keeps nothing on disk)."""
    require_server()
    prefix = f"ubt-{uuid.uuid4().hex[:12]}"
    yield store_url(server_url(), prefix)
    drop_prefix(server_url(), prefix)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DurableRedis:
    """A ``redis-server`` of this test's own, with ``appendfsync`` as given (default ``always``),
    its files in ``directory``. ``kill()`` SIGKILLs it; ``start()`` starts it again on the same
    files and port."""

    def __init__(self, directory: Path, *, appendfsync: str = "always") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            _skip_or_fail("redis-server is not installed (apt-get install -y redis-server)")
        self.binary = str(binary)
        self.directory = directory
        self.appendfsync = appendfsync
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "redis.log"
        self.extra_args: list[str] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.log),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited at start: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                client = redis.Redis(port=self.port, socket_connect_timeout=1)
                client.ping()
                client.close()
                return
            except redis.BusyLoadingError:
                pass
            except redis.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 20 s")

    def kill(self) -> None:
        """SIGKILL the server (no shutdown, no last write) and wait for it to be gone."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self.process = None


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[DurableRedis]:
    """A private ``redis-server`` with ``appendfsync always``, started; killed after the test."""
    server = DurableRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


class ReplyDropper:
    """A TCP proxy in front of a Redis server that, when armed, lets the next request through to
    the server and then cuts the connection instead of passing the reply back: the write is
    applied, the client never hears so."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.dropped += 1
                    break
                sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()
