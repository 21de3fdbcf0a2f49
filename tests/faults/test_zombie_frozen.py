"""A live process that lost its lease must not act: frozen by SIGSTOP, or starved of the GIL.

Each test freezes the first process after its intent was saved and before it acted, for longer
than its lease (1 s). A second process takes the run over, its probe truthfully says "not
executed", it charges. Then the first one wakes: it must not charge. Exactly one charge.
"""

from __future__ import annotations

from zombie_world import ZombieWorld, frozen_by_sigstop, starved_by_the_gil


def test_a_holder_frozen_by_sigstop_past_its_lease_does_not_act_when_it_wakes(world: ZombieWorld) -> None:
    second, woke = frozen_by_sigstop(world)
    assert second["status"] == "completed" and woke["error"] == "LeaseLost"
    assert world.charges() == 1


def test_a_holder_whose_heartbeat_was_starved_by_c_code_holding_the_gil_does_not_act(world: ZombieWorld) -> None:
    second, woke = starved_by_the_gil(world)
    assert second["status"] == "completed" and woke["error"] == "LeaseLost"
    assert world.charges() == 1
