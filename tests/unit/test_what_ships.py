"""What ships is what users import: the wheel holds the library, the CLI and its demo data, the
store contract suite and chaos; the fault-injection kit and the reliability runner stay in the
repository (tests/faults_kit, scripts/)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "unbroken"
TEST_MACHINERY = re.compile(r"(^|/)(faults|faults_kit|reliability\.py|conftest\.py|tests?/)|\.c$")


def test_the_package_source_holds_no_test_machinery() -> None:
    shipped = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*") if "__pycache__" not in path.parts]
    assert [name for name in shipped if TEST_MACHINERY.search(name)] == []


def test_only_the_store_contract_suite_imports_pytest() -> None:
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if re.search(r"^\s*(import pytest|from pytest\b)", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    }
    assert {name for name in importers if not name.startswith("testing/contract/")} == set()


@pytest.mark.slow
def test_the_built_wheel_holds_no_test_machinery_and_keeps_the_demo_data(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("unbroken-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [name for name in names if TEST_MACHINERY.search(name)] == []
    assert "unbroken/cli/demo/data/tickets.json" in names and "unbroken/testing/contract/__init__.py" in names
