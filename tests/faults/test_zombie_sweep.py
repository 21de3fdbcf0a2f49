"""The zombie scenarios over and over (``make reliability``): prints the figure quoted in
docs/guarantees.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from zombie_world import ZombieWorld, frozen_by_sigstop, frozen_inside_the_tool, starved_by_the_gil

ROUNDS = 10
Scenario = Callable[[ZombieWorld], tuple[dict[str, Any], dict[str, Any]]]


@pytest.mark.slow
def test_no_frozen_or_starved_holder_ever_acts_after_a_takeover(store_url: str, tmp_path: Path) -> None:
    scenarios: dict[str, Scenario] = {
        "SIGSTOP before the execute point": frozen_by_sigstop,
        "GIL held by C code before the execute point": starved_by_the_gil,
        "SIGSTOP inside the tool, woken within the grace": frozen_inside_the_tool,
    }
    runs = charges = 0
    for name, scenario in scenarios.items():
        for round_number in range(ROUNDS):
            run_id = f"zombie-{len(name)}-{round_number}"
            world = ZombieWorld(store_url, tmp_path / run_id, run_id=run_id)
            try:
                second, _ = scenario(world)
                assert second["status"] == "completed", (name, second)
                runs += 1
                charges += world.charges()
                assert world.charges() == 1, (name, round_number)
            finally:
                world.close()
    print(f"\nzombie owners on {store_url.split(':')[0]}: {runs} takeovers of a frozen holder, {charges} charges")
    assert charges == runs
