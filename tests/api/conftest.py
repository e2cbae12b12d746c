"""Shared fixtures of the gateway tests: an app, and one served over HTTP on each store (the
hot log's ``store`` fixture, :mod:`tests.conftest`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from tests.api.helpers import Gateway, make_settings
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import serve_in_thread


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A fresh app on an embedded SQLite store."""
    with TestClient(create_app(make_settings(tmp_path))) as client:
        yield Gateway(client)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def shared_gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """One app per module and store, for a state machine's many examples (each example works
    under its own fresh gateway id)."""
    path: Path = tmp_path_factory.mktemp("shared-gateway")
    if request.param == "sqlite":
        with TestClient(create_app(make_settings(path))) as client:
            yield Gateway(client)
        return
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    try:
        with TestClient(create_app(make_settings(path), store=store)) as client:
            yield Gateway(client)
    finally:
        store.close()
        drop_pg_schema(schema)


@dataclass(frozen=True)
class Served:
    """A gateway over real HTTP, its protocol helpers, and the store it runs on."""

    gateway: Gateway
    store: HotLog
    url: str


@pytest.fixture
def served(store: HotLog, tmp_path: Path) -> Iterator[Served]:
    """A gateway on each store, served over real HTTP from a thread of this process; the test
    holds the store too (to publish checkpoints and trim the log as the lake job does)."""
    with (
        serve_in_thread(create_app(make_settings(tmp_path), store=store)) as url,
        httpx.Client(base_url=url) as http,
    ):
        yield Served(Gateway(http), store, url)
