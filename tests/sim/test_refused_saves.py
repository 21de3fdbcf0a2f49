"""An agent configured with a value JSON carries but no load accepts (``business_state_version``
-1): the write-time check refuses the first save, the run call ends with that clear error and
nothing unloadable is acknowledged; switched off (``codec.accept_before_save``), the save is
acknowledged and the run no longer loads."""

from __future__ import annotations

from dataclasses import replace

from test_data_loss import SCENARIO

from unbroken.testing.simulate import from_text, play
from unbroken.testing.simulate.mutations import MUTATIONS

MISCONFIGURED = replace(SCENARIO, agent_options={"business_state_version": -1})
SCHEDULE = from_text("step p0 4\nstep p1 4")


def test_a_save_no_load_accepts_is_refused_and_the_run_ends_with_the_reason() -> None:
    outcome = play(MISCONFIGURED, SCHEDULE)
    assert not outcome.failed
    refused = [line for line in outcome.trace if "raised UnloadableState" in line]
    assert refused and "business_state_version is -1" in refused[0] and "nothing was saved" in refused[0]


def test_with_the_write_time_check_off_an_acknowledged_save_does_not_load() -> None:
    with MUTATIONS["write_time_check"]():
        outcome = play(MISCONFIGURED, SCHEDULE)
    assert "saves_load" in {violation.invariant for violation in outcome.violations}
