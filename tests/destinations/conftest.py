"""Destinations under test: the machine's PostgreSQL and MariaDB, the BigQuery emulator and the
lake (an embedded Iceberg catalog in a temporary data dir).

Each test gets a fresh database (PostgreSQL schema / MariaDB database / BigQuery dataset / lake
data dir) so
tests never see each other's tables. A missing server skips locally and fails under CI.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pymysql
import pytest

from lakesync.destination_specs import DeleteMode, DestinationSpec
from lakesync.destinations.base import Destination
from lakesync.destinations.factory import mysql_params, open_destination
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.settings import LakeSettings
from tests.conftest import PG_DSN, require_postgres

MYSQL_DSN = os.environ.get("LAKESYNC_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/test")
BIGQUERY_ENDPOINT = os.environ.get("LAKESYNC_TEST_BIGQUERY_ENDPOINT", "")
# The emulator answers a statement in about a second: its cases are slow.
KINDS = ["postgres", "mysql", "lake", pytest.param("bigquery", marks=pytest.mark.slow)]
_names = itertools.count()


def _answers(endpoint: str) -> bool:
    """Whether the emulator answers (a dead endpoint would make the client retry for minutes)."""
    try:
        httpx.get(f"{endpoint}/bigquery/v2/projects/p/datasets", timeout=5).raise_for_status()
    except httpx.HTTPError:
        return False
    return True


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing server fails the test)", pytrace=False)
    pytest.skip(reason)


def require_mysql() -> None:
    """Return when the test MariaDB answers; else skip (fail under CI)."""
    try:
        pymysql.connect(**mysql_params(MYSQL_DSN), connect_timeout=2).close()  # type: ignore[arg-type]
    except pymysql.MySQLError as exc:
        _unavailable(f"MariaDB not reachable at {MYSQL_DSN}: {exc}")


def require_bigquery() -> None:
    """Return when the BigQuery emulator answers; else skip (fail under CI)."""
    if not BIGQUERY_ENDPOINT or not _answers(BIGQUERY_ENDPOINT):
        _unavailable(f"no BigQuery emulator at {BIGQUERY_ENDPOINT or '(unset)'}: "
                     "set LAKESYNC_TEST_BIGQUERY_ENDPOINT (scripts/services.sh starts it)")


def _fresh_postgres() -> tuple[str, str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create schema "{schema}"')
    parts = urlsplit(PG_DSN)
    query = f"options=-csearch_path%3D{schema}"
    return urlunsplit(parts._replace(query=query)), schema


def _fresh_mysql() -> tuple[str, str]:
    db = f"t_{uuid.uuid4().hex[:12]}"
    conn = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
    with conn.cursor() as cur:
        cur.execute(f"create database `{db}`")
    conn.close()
    parts = urlsplit(MYSQL_DSN)
    return urlunsplit(parts._replace(path=f"/{db}")), db


def _drop(kind: str, name: str) -> None:
    if kind == "postgres":
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'drop schema "{name}" cascade')
    elif kind == "mysql":
        conn = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
        with conn.cursor() as cur:
            cur.execute(f"drop database `{name}`")
        conn.close()
    elif kind == "lake":
        shutil.rmtree(name, ignore_errors=True)


def open_fresh(
    kind: str, delete: DeleteMode = "soft", gateway: str = "gw1"
) -> tuple[Destination, str]:
    """A destination of ``kind`` on a fresh, empty database; returns it and the name to drop."""
    if kind == "postgres":
        require_postgres()
        url, name = _fresh_postgres()
    elif kind == "mysql":
        require_mysql()
        url, name = _fresh_mysql()
    elif kind == "lake":
        name = tempfile.mkdtemp(prefix="lake-dest-")
        lake = LakeSettings.from_env(name, env={})
        init_catalog_tables(lake)
        spec = DestinationSpec("lake", "lake://exports", gateway, delete=delete,
                               name=f"d{next(_names)}")
        return open_destination(spec, env={}, lake=lake), name
    else:
        require_bigquery()
        name = f"t_{uuid.uuid4().hex[:12]}"
        url = f"bigquery://test-project/{name}?endpoint={BIGQUERY_ENDPOINT}"
    spec = DestinationSpec(kind, url, gateway, delete=delete, name=f"d{next(_names)}")  # type: ignore[arg-type]
    return open_destination(spec, env={}), name


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["soft", "hard"])
def delete_mode(request: pytest.FixtureRequest) -> DeleteMode:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def destination(kind: str, delete_mode: DeleteMode) -> Iterator[Destination]:
    dest, name = open_fresh(kind, delete_mode)
    try:
        yield dest
    finally:
        dest.close()
        _drop(kind, name)
