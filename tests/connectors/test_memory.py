"""What a poll holds in memory, measured with tracemalloc (Python allocations of the whole
poll: source, poller and the gateway's push path) on large snapshots with a small chunk_rows.

The bound: one chunk of rows (``chunk_rows``, the declared budget) and one page of stored row
ids, plus a constant; the ids of a full pass go to a temporary file. Before, a 50,000-row diff
held every id (the seen set and the key list in its cursor) and peaked at 6.3 MiB (first load)
and 8.8 MiB (the diff after deletes), over the constant stated here.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from lakesync.connector_specs import parse_connector
from lakesync.connectors import open_source
from lakesync.connectors.jira import JiraSource
from tests.connectors.conftest import GatewayUnderTest
from tests.connectors.fake_jira import FakeJira
from tests.connectors.test_database import SourceDb
from tests.connectors.test_jira import seed, spec

pytestmark = pytest.mark.slow

CHUNK_ROWS = 100
CONSTANT = 5 * 2**19
"""The stated constant: what a poll may hold besides its chunk (buffers, the driver, the
gateway's push path), whatever the size of the source."""


def peak_of_poll(gateway: GatewayUnderTest, source: Any, name: str) -> int:
    """Peak traced memory (bytes) of one poll of ``source``."""

    async def run() -> None:
        try:
            await gateway.poller(name, source).poll_once()
        finally:
            await source.aclose()

    tracemalloc.start()
    try:
        asyncio.run(run())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def size_of_ids(ids: list[str]) -> int:
    """What holding ``ids`` in a set takes (the old diff held the table's ids like this)."""
    tracemalloc.start()
    try:
        held = {i.encode().decode() for i in ids}  # fresh strings, as a source reads them
        size = tracemalloc.get_traced_memory()[0]
        del held
        return size
    finally:
        tracemalloc.stop()


@pytest.fixture
def big_table() -> Iterator[SourceDb]:
    db = SourceDb("postgres")
    db.run(
        f"INSERT INTO {db.table} SELECT i, 'eu', 'row ' || i, i * 1.5, true, '{{}}',"
        " '2026-01-01 00:00:00' FROM generate_series(1, 50000) i"
    )
    yield db
    db.drop()


@pytest.mark.postgres
def test_a_50000_row_diff_stays_within_chunk_plus_constant(
    gateway: GatewayUnderTest, big_table: SourceDb
) -> None:
    body = {"kind": "postgres", "gateway": "gw1", "dsn": big_table.dsn, "strategy": "diff"}
    body |= {"source_table": big_table.table, "table": "items", "key": ["id", "region"]}
    body |= {"chunk_rows": CHUNK_ROWS}

    def source() -> Any:
        return open_source(parse_connector("db1", body))

    first = peak_of_poll(gateway, source(), "db1")
    big_table.run(f"DELETE FROM {big_table.table} WHERE id % 10 = 0")
    big_table.run(f"UPDATE {big_table.table} SET name = 'changed' WHERE id % 500 = 1")
    second = peak_of_poll(gateway, source(), "db1")
    rows = gateway.rows("items")
    assert len(rows) == 45000 and rows["1:eu"]["name"] == "changed"
    ids = size_of_ids(list(rows))
    print(
        f"diff of 50,000 rows, chunk_rows={CHUNK_ROWS}: peak {first / 2**20:.2f} MiB (first "
        f"load), {second / 2**20:.2f} MiB (5,000 deletes, 100 updates); the ids alone in a "
        f"set: {ids / 2**20:.2f} MiB"
    )
    assert first < CONSTANT and second < CONSTANT


def test_a_poll_of_1000_jira_issues_stays_within_chunk_plus_constant(
    gateway: GatewayUnderTest,
) -> None:
    with FakeJira() as jira:
        seed(jira, 1000)
        peak = peak_of_poll(gateway, JiraSource(spec(jira, chunk_rows=25)), "jira1")
        again = peak_of_poll(gateway, JiraSource(spec(jira, chunk_rows=25)), "jira1")
    print(
        f"jira poll of 1,000 issues, chunk_rows=25: peak {peak / 2**20:.2f} MiB, "
        f"{again / 2**20:.2f} MiB (a poll with nothing new)"
    )
    assert peak < CONSTANT and again < CONSTANT
