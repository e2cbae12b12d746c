"""Fixtures for end-to-end client tests: a real gateway in a subprocess."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync.api.app import create_app
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from tests.api.helpers import make_settings
from tests.client.client_thread_gateway import ThreadGateway
from tests.gateway_process import ServerProcess, serve_in_thread


def _start(tmp: Path) -> ServerProcess:
    # Clients here reconnect and resend at will: the per-connection message rate is not limited.
    return ServerProcess(tmp / "gw-data", {"LAKESYNC_WS_RATE_LIMIT": "0"}).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One gateway per test module; tests isolate themselves with unique gateway ids."""
    gw = _start(tmp_path_factory.mktemp("gateway"))
    yield gw
    gw.stop()


@pytest.fixture
def own_gateway(tmp_path: Path) -> Iterator[ServerProcess]:
    """A gateway of this test alone (for tests that restart it)."""
    gw = _start(tmp_path)
    yield gw
    gw.stop()


@pytest.fixture
def gw_id() -> str:
    """A fresh gateway id, so tests sharing a gateway process never see each other's data."""
    return f"gw{uuid.uuid4().hex[:12]}"


@pytest.fixture
def thread_gateway(tmp_path: Path) -> Iterator[ThreadGateway]:
    """A :class:`ThreadGateway` on an SQLite store in ``tmp_path``."""
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    with serve_in_thread(create_app(make_settings(tmp_path), store=store)) as url:
        yield ThreadGateway(store, url)
    store.close()
