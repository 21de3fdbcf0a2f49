"""An agent configured with a migration whose result no load accepts (``world.ODD_CONFIG``: from
``business_state_version`` 1, a list), opening runs an older agent saved at version 1: the
write-time check refuses the migrated save, the run call ends with that clear error and nothing
unloadable is acknowledged; switched off (``codec.accept_before_save``), the save is
acknowledged and the run no longer loads."""

from __future__ import annotations

from dataclasses import replace

from test_data_loss import SCENARIO

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.mutations import MUTATIONS
from unbroken.testing.simulate.world import ODD_CONFIG

MISCONFIGURED = replace(SCENARIO, agent_options=dict(ODD_CONFIG), saved_by_version=1)
SCHEDULE = from_text("step p0 4\nstep p1 4")


def test_a_save_no_load_accepts_is_refused_and_the_run_ends_with_the_reason() -> None:
    outcome = play(MISCONFIGURED, SCHEDULE)
    assert not outcome.failed
    refused = [line for line in outcome.trace if "raised UnloadableState" in line]
    assert (
        refused and "field business_state is a array, not a object" in refused[0] and "nothing was saved" in refused[0]
    )


def test_with_the_write_time_check_off_an_acknowledged_save_does_not_load() -> None:
    with MUTATIONS["write_time_check"]():
        outcome = play(MISCONFIGURED, SCHEDULE)
    assert "saves_load" in {violation.invariant for violation in outcome.violations}
