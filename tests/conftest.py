"""Shared by every test tier. Its presence puts ``tests/`` on ``sys.path`` (pytest's default
import mode), so tests import the repository-only fault kit as ``faults_kit``.

``make test`` runs the tiers on two pytest-xdist workers; a worker's environment says
``COLUMNS=80`` (set by xdist, not by a terminal), which would make the command line fold ids
that the tests read whole: removed here, so a test sees what a pipe gets in production."""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_configure(config: object) -> None:
    """Refuse to test another tree's unbroken: an editable install made from another checkout
    (its ``.pth`` names that checkout's ``src``) would have every test here import that code."""
    from pathlib import Path

    import unbroken

    here = Path(__file__).resolve().parent.parent
    loaded = Path(unbroken.__file__).resolve()
    if not loaded.is_relative_to(here):
        import pytest

        raise pytest.UsageError(
            f"these tests are in {here}, but `import unbroken` loads {loaded}: an editable install from "
            f"another checkout. Run `pip install -e .` here, or set PYTHONPATH={here / 'src'}."
        )
