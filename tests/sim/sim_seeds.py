"""The seeds the default tier plays, and the ones known to show a hole in the code as it is."""

from __future__ import annotations

WITHIN = 120
"""Seeds 0..WITHIN-1: every switched-off defence must be found among them, and the code as it
is must keep every invariant on all of them but the known holes."""

KNOWN_HOLES: dict[int, str] = {
    70: "grace not inherited: a zombie's act in flight lands after a later holder trusted 'not executed'",
}
"""Seeds whose schedule breaks an invariant on the code as it is (docs/simulation.md, Holes found)."""
