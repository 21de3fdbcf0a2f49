from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import cli_agents
import pytest
from cli_helpers import HERE, Invoke, Place
from click.testing import CliRunner, Result

from unbroken import ModelCallFailed, open_store
from unbroken.cli import main


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    db = tmp_path / "runs.db"
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    url = f"sqlite:///{db}"
    monkeypatch.setenv(cli_agents.STORE_ENV, url)
    monkeypatch.setenv(cli_agents.OUTBOX_ENV, str(outbox))
    monkeypatch.delenv("UNBROKEN_STORE", raising=False)
    monkeypatch.delenv("UNBROKEN_CRASH_AT", raising=False)
    monkeypatch.syspath_prepend(str(HERE))  # so `--agent cli_agents:make_agent` imports
    return Place(url, db, outbox)


@pytest.fixture
def invoke() -> Invoke:
    """Run the `unbroken` command in-process; stdout and stderr are kept apart."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(main, list(args))

    return run


@pytest.fixture
def seeded(place: Place) -> Iterator[Place]:
    """A store holding 'done-run' (completed, one sent notice) and 'open-run' (the model failed
    after its first turn: still in progress, with one ledger entry)."""
    with open_store(place.url) as store:
        cli_agents.build_agent(store, place.outbox).run(
            cli_agents.TASK, run_id="done-run", business_state={"customer": "ann", "tier": "gold"}
        )
        with pytest.raises(ModelCallFailed):
            cli_agents.build_agent(store, place.outbox, [cli_agents.SEND_TURN]).run("Tell Bob", run_id="open-run")
    yield place
