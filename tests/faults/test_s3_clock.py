"""On S3 a lease is judged by the service's clock, read from every response's ``Date``.

A process opens the store (its first responses give it the service's time), then its wall
clock steps an hour ahead (libfaketime, the monotonic clock untouched: an NTP step, a VM
resume). It must still see the live holder's lease as live: ``LeaseHeld``, one charge. Before
the fix, the service's clock was this machine's wall clock plus an offset measured once at
open, so the step made the lease look expired an hour early and the run was taken over.
The holder runs under another host's name, so that only the lease's expiry protects it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3test import endpoint, new_bucket, store_url
from zombie_world import ZombieWorld

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.fixture
def s3_world(tmp_path: Path) -> Iterator[ZombieWorld]:
    url = endpoint()
    world = ZombieWorld(store_url(url, new_bucket(url)), tmp_path)
    yield world
    world.close()


def test_a_wall_clock_step_after_the_store_was_opened_does_not_let_a_takeover_happen_early(
    s3_world: ZombieWorld, tmp_path: Path
) -> None:
    if shutil.which("faketime") is None or not LIBFAKETIME.exists():
        if os.environ.get("CI"):
            pytest.fail("faketime (libfaketime) is not installed (CI is set, so this test must run)")
        pytest.skip("faketime (libfaketime) is not installed")
    world = s3_world
    holder = world.start("first", "--elsewhere", "--pause", "tool-wait", "--ttl", "3")
    world.wait_for("first", "paused", holder)  # inside the tool, heartbeat renewing its lease
    stepped = tmp_path / "faketime.rc"
    stepped.write_text("+0\n")
    env = {
        **os.environ,
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(stepped),
        "FAKETIME_NO_CACHE": "1",
        "DONT_FAKE_MONOTONIC": "1",
    }
    taker = world.start("second", "--wait-after-open", "--ttl", "3", env=env)
    world.wait_for("second", "opened", taker)
    stepped.write_text("+1h\n")  # the taker's wall clock steps an hour ahead, after the open
    world.marker("second", "go-on").touch()
    second = world.finish(taker)
    world.charges_file.with_suffix(".txt.go").touch()
    first = world.finish(holder)
    assert world.charges() == 1, (second, first)
    assert second["error"] == "LeaseHeld" and first["status"] == "completed"
