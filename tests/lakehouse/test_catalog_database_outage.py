"""A JDBC catalog whose PostgreSQL cannot be reached is an outage of the lake
(:class:`CatalogUnavailableError`, 502 ``CATALOG_ERROR``) naming the database, never its
password: the landing flush answers it and logs it once instead of a stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.catalog import (
    LANDING_IDENTIFIER,
    CatalogUnavailableError,
    catalog_failure,
    open_catalog,
)
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.settings import LakeSettings
from tests.gateway_process import free_port


def _unreachable_catalog(tmp_path: Path) -> LakeSettings:
    port = free_port()  # nobody listens there
    return LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_CATALOG_URI": f"jdbc:postgresql://127.0.0.1:{port}/lake",
        "LAKESYNC_CATALOG_USER": "lake",
        "LAKESYNC_CATALOG_PASSWORD": "s3cret-pw",
    })


def test_an_unreachable_catalog_database_is_a_catalog_outage(tmp_path: Path) -> None:
    settings = _unreachable_catalog(tmp_path)
    catalog = open_catalog(settings)
    with pytest.raises(Exception) as raised:
        catalog.load_table(LANDING_IDENTIFIER)
    failure = catalog_failure(raised.value, catalog)
    assert isinstance(failure, CatalogUnavailableError)
    assert failure.status == 502 and failure.code == "CATALOG_ERROR"
    message = str(failure)
    port = settings.catalog_uri.rsplit(":", 1)[1].split("/")[0]
    assert f"postgresql+psycopg://127.0.0.1:{port}/lake" in message, message
    assert "s3cret-pw" not in message and "lake@" not in message, message
    assert "lake.catalog_uri" in message and "\n" not in message


def test_a_flush_on_an_unreachable_catalog_database_raises_the_outage(tmp_path: Path) -> None:
    store = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
    try:
        flusher = LandingFlusher(open_catalog(_unreachable_catalog(tmp_path)), store)
        with pytest.raises(CatalogUnavailableError, match="cannot reach the lake's catalog"):
            flusher.flush()
    finally:
        store.close()
