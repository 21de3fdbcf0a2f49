"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``,
unmodified) against ``UnbrokenSaver`` on unbroken's SQLite, PostgreSQL, file and memory stores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport
from pgtest import fresh_schema

from unbroken import open_store
from unbroken.integrations.langgraph import UnbrokenSaver

IMPLEMENTED = {"put", "put_writes", "get_tuple", "list", "delete_thread", "copy_thread", "delete_for_runs", "prune"}


def run_suite(make_url: Callable[[], str]) -> CapabilityReport:
    stores = []

    @checkpointer_test(name="UnbrokenSaver")
    async def saver() -> AsyncGenerator[UnbrokenSaver, None]:
        store = open_store(make_url())  # a fresh store for each capability suite
        stores.append(store)
        yield UnbrokenSaver(store)

    try:
        return asyncio.run(validate(saver))
    finally:
        for store in stores:
            store.close()


def assert_passes(report: CapabilityReport) -> None:
    results = report.results
    failures = {cap: result.failures for cap, result in results.items() if result.passed is False}
    assert failures == {}
    assert {cap for cap, result in results.items() if result.passed} == IMPLEMENTED
    assert report.passed_all()


def test_the_conformance_suite_passes_on_sqlite(tmp_path: Path) -> None:
    counter = iter(range(100))
    assert_passes(run_suite(lambda: f"sqlite:///{tmp_path / f'lg{next(counter)}.db'}"))


def test_the_conformance_suite_passes_on_the_file_store(tmp_path: Path) -> None:
    counter = iter(range(100))
    assert_passes(run_suite(lambda: f"file://{tmp_path / f'lg{next(counter)}'}"))


def test_the_conformance_suite_passes_on_memory() -> None:
    assert_passes(run_suite(lambda: "memory://"))


@pytest.fixture
def pg_urls() -> Iterator[Callable[[], str]]:
    with fresh_schema("ublg") as (_, url):
        yield lambda: url


@pytest.mark.postgres
def test_the_conformance_suite_passes_on_postgresql(pg_urls: Callable[[], str]) -> None:
    assert_passes(run_suite(pg_urls))
