"""Fixtures of the connector tests: a gateway's push path over a real store, reopened at will
(a restart), and its rows as the connectors left them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pymysql
import pytest

from lakesync.api.metrics import GatewayMetrics
from lakesync.api.services.connectors import GatewaySink
from lakesync.api.services.hub import Hub
from lakesync.api.services.sync import SyncService
from lakesync.connector_specs import connector_client_id
from lakesync.connectors import Poller, Source
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from tests.api.helpers import make_settings


def wire_time(text: str | None) -> str | None:
    """An API's ISO 8601 date-time (``2026-01-02T03:04:05.000+0000``) in the canonical
    ``timestamp`` form, written out here (not by the code under test)."""
    if text is None:
        return None
    instant = datetime.fromisoformat(text).astimezone(UTC)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond:06d}Z"


MYSQL_DSN = os.environ.get("LAKESYNC_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/test")


def require_mysql() -> None:
    """Return when the test MariaDB/MySQL server answers; otherwise skip the calling test, or
    fail it when env ``CI`` is set (as :func:`tests.conftest.require_postgres` does)."""
    from lakesync.connectors.database import MysqlDialect

    try:
        MysqlDialect().connect(MYSQL_DSN).close()
        return
    except pymysql.err.OperationalError as exc:
        reason = f"MySQL not reachable at {MYSQL_DSN}: {exc}"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing server fails the test)", pytrace=False)
    pytest.skip(reason)


class GatewayUnderTest:
    """A gateway's service over a SQLite hot log in ``tmp_path``; :meth:`restart` closes and
    reopens it (what a gateway restart keeps is what the store kept)."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.tmp_path = tmp_path
        self.settings = make_settings(tmp_path, **settings)
        self.store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
        self.service = SyncService(self.store, self.settings, GatewayMetrics(), Hub(10))

    def restart(self) -> None:
        self.store.close()
        self.store = SqliteHotLog(self.tmp_path / "hot.sqlite3", HLC())
        self.service = SyncService(self.store, self.settings, GatewayMetrics(), Hub(10))

    def poller(
        self, name: str, source: Source, gw: str = "gw1", contract: Any = None
    ) -> Poller:
        return Poller(
            name,
            source,
            GatewaySink(self.service, self.store, gw, name),
            connector_client_id(name),
            1.0,
            contract=contract,
        )

    def poll(self, source: Source, name: str = "conn1", contract: Any = None) -> int:
        """One poll of ``source`` by connector ``name`` (under ``contract``, a
        :class:`~lakesync.connector_specs.SchemaContract` or mode); the source is closed
        after it."""

        async def run() -> int:
            try:
                return await self.poller(name, source, contract=contract).poll_once()
            finally:
                await source.aclose()

        return asyncio.run(run())

    def rows(self, table: str, gw: str = "gw1") -> dict[str, dict[str, Any]]:
        """The live rows of ``table``: row id → visible columns."""
        page = self.store.read_all_rows(gw)
        out = {}
        for (t, row_id), record in page.rows.items():
            visible = record.state.visible()
            if t == table and visible is not None:
                out[row_id] = visible
        return out

    def log(self, gw: str = "gw1") -> list[Any]:
        """Every delta stored for ``gw``, in ingest order."""
        return [d for _, _, d in self.store.read_log(0, 10**9, gw)]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayUnderTest]:
    g = GatewayUnderTest(tmp_path)
    yield g
    g.store.close()


CLOUDWATCH_ENDPOINT = os.environ.get("LAKESYNC_TEST_CLOUDWATCH_ENDPOINT", "")


def require_cloudwatch() -> str:
    """The local CloudWatch Logs server's endpoint (moto, started by scripts/services.sh);
    skip the calling test when it does not answer, or fail it when env ``CI`` is set."""
    import httpx

    try:
        httpx.get(f"{CLOUDWATCH_ENDPOINT}/moto-api/", timeout=5).raise_for_status()
        return CLOUDWATCH_ENDPOINT
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        reason = f"no CloudWatch Logs server at {CLOUDWATCH_ENDPOINT or '(unset)'}: {exc}"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing server fails the test)", pytrace=False)
    pytest.skip(reason)
