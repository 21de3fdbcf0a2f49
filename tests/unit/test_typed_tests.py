"""Tests are type-checked too (issue 13, item 4): ``make typecheck`` runs ``mypy --strict`` on
each folder in the Makefile's ``TYPED_TESTS`` and on tests/integration's own files, so a test
folder missing from that list would silently go unchecked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def makefile_list(makefile: str, name: str) -> list[str]:
    """The words of the Makefile variable ``name`` (continuation lines joined)."""
    match = re.search(rf"^{name} := (.*)$", makefile.replace("\\\n", " "), re.MULTILINE)
    assert match is not None, f"the Makefile defines no {name}"
    return match.group(1).split()


def folders_with_test_code(tests: Path) -> set[str]:
    """Each folder holding test code: tests/<tier>, and tests/integration/<tier>."""
    folders = set()
    for path in tests.rglob("*.py"):
        parts = path.relative_to(tests).parts
        if parts[0] == "integration" and len(parts) > 2:
            folders.add(f"tests/integration/{parts[1]}")
        elif parts[0] != "integration" and len(parts) > 1:
            folders.add(f"tests/{parts[0]}")
    return folders


def test_every_test_folder_is_in_the_typecheck_list() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "for dir in $(TYPED_TESTS); do" in makefile and "mypy --strict $$dir" in makefile
    listed = set(makefile_list(makefile, "TYPED_TESTS"))
    missing = folders_with_test_code(ROOT / "tests") - listed
    assert not missing, f"add {sorted(missing)} to TYPED_TESTS in the Makefile (and make them mypy --strict clean)"


def test_the_integration_tiers_own_files_are_type_checked_too() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert makefile_list(makefile, "TYPED_INTEGRATION_FILES") == ["$(wildcard", "tests/integration/*.py)"]
    assert "mypy --strict $(TYPED_INTEGRATION_FILES)" in makefile
