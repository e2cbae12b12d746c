"""Shared pytest setup: Hypothesis profiles and the test database servers.

Local runs load ``dev`` (random, so they keep exploring); CI loads ``ci`` (set env ``CI``), which
is derandomized so a CI run is reproducible. Neither has a per-example deadline nor the "too
slow" health check: how long an example takes depends on the machine and its load, not on the
code under test.

A test that needs a database server skips when the server is missing on a developer's machine,
but fails under CI: a CI run without its server must not pass by skipping those tests.

The suite runs in parallel with pytest-xdist (``scripts/test.sh``: ``-n auto --dist loadgroup``):
tests take their ports from ``tests.gateway_process.free_port`` and their PostgreSQL schemas and
databases, MariaDB databases and data dirs fresh per test, so workers never meet; the Spark and
dbt tests share one worker (one JVM at a time, one dbt project dir).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg import sql

from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from tests.wheel_venv import build_wheel_venv, session_dir

PG_DSN = os.environ.get("LAKESYNC_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("dev"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def require_postgres() -> None:
    """Return when the test PostgreSQL server (``LAKESYNC_TEST_PG_DSN``) answers; otherwise skip
    the calling test, or fail it when env ``CI`` is set."""
    try:
        with psycopg.connect(PG_DSN, connect_timeout=2):
            return
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL not reachable at {PG_DSN}: {exc}".strip()
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing server fails the test)", pytrace=False)
    pytest.skip(reason)


def fresh_pg_database() -> str:
    """The URL of a new, empty database on the test PostgreSQL server (after
    :func:`require_postgres`)."""
    require_postgres()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    return urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}"))


def allow_connections(url: str, allow: bool) -> None:
    """Let a database of :func:`fresh_pg_database` take connections or refuse them (its open
    sessions ended): a store that is down while its server runs."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'alter database "{name}" allow_connections {str(allow).lower()}')
        if not allow:
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = %s",
                (name,),
            )


def drop_pg_database(url: str) -> None:
    """Drop the database :func:`fresh_pg_database` made for ``url``."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'drop database "{name}" with (force)')


def fresh_pg_schema() -> str:
    """A unique schema name so parallel runs never collide."""
    return f"lakesync_test_{uuid.uuid4().hex[:12]}"


def drop_pg_schema(schema: str) -> None:
    """Remove a test schema and everything in it."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HotLog]:
    """Each hot-log store implementation, fresh and empty (its behaviour suites in
    ``tests/hotlog/``; the gateway's tests serve on each)."""
    clock = HLC()
    if request.param == "sqlite":
        s: HotLog = SqliteHotLog(tmp_path / "hot.sqlite3", clock)
        yield s
        s.close()
        return
    require_postgres()
    schema = fresh_pg_schema()
    s = PostgresHotLog(PG_DSN, clock, schema=schema, pool_size=4)
    yield s
    s.close()
    drop_pg_schema(schema)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty database on the test PostgreSQL server, dropped after the test."""
    url = fresh_pg_database()
    yield url
    drop_pg_database(url)


S3_ENDPOINT = os.environ.get("LAKESYNC_TEST_S3_ENDPOINT", "")
S3_ACCESS_KEY_ID = os.environ.get("LAKESYNC_TEST_S3_ACCESS_KEY_ID", "lakesync")
S3_SECRET_ACCESS_KEY = os.environ.get("LAKESYNC_TEST_S3_SECRET_ACCESS_KEY", "lakesync-secret")


def require_s3() -> None:
    """Return when the test S3 server (``LAKESYNC_TEST_S3_ENDPOINT``, S3Proxy started by
    scripts/services.sh) answers; else skip, or fail under CI."""
    try:
        # Any S3 server answers an anonymous listing with XML (an error or the buckets).
        answered = b"<" in httpx.get(f"{S3_ENDPOINT}/", timeout=5).content if S3_ENDPOINT else False
    except httpx.HTTPError:
        answered = False
    if not answered:
        reason = (f"no S3 server at {S3_ENDPOINT or '(unset)'}: set LAKESYNC_TEST_S3_ENDPOINT "
                  "(scripts/services.sh starts one)")
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: a missing server fails the test)", pytrace=False)
        pytest.skip(reason)


def fresh_s3_bucket() -> str:
    """The name of a new, empty bucket on the test S3 server (after :func:`require_s3`)."""
    require_s3()
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_client().create_bucket(Bucket=name)
    return name


def s3_client() -> Any:
    """A boto3 S3 client of the test S3 server."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=S3_ENDPOINT, aws_access_key_id=S3_ACCESS_KEY_ID,
        aws_secret_access_key=S3_SECRET_ACCESS_KEY, region_name="us-east-1",
    )


def s3_lake_env(bucket: str, prefix: str = "lake") -> dict[str, str]:
    """The ``LAKESYNC_*`` variables of a lake whose warehouse is ``s3://bucket/prefix`` on the
    test S3 server."""
    return {
        "LAKESYNC_WAREHOUSE": f"s3://{bucket}/{prefix}",
        "LAKESYNC_S3_ENDPOINT": S3_ENDPOINT,
        "LAKESYNC_S3_REGION": "us-east-1",
        "LAKESYNC_S3_PATH_STYLE": "true",
        "LAKESYNC_S3_ACCESS_KEY_ID": S3_ACCESS_KEY_ID,
        "LAKESYNC_S3_SECRET_ACCESS_KEY": S3_SECRET_ACCESS_KEY,
    }


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding only the wheel built from this checkout (:mod:`tests.wheel_venv`),
    one per test session."""
    return build_wheel_venv(session_dir(tmp_path_factory.getbasetemp()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep each module's Spark or dbt tests on one xdist worker (``--dist loadgroup``): they
    share the module's lake, Spark session and servers. Different modules may run side by side,
    one JVM per worker (each lake has its own data dir, dbt project copy and ports), so the
    Spark tests no longer queue behind each other on a single worker."""
    for item in items:
        if item.get_closest_marker("spark") or item.get_closest_marker("dbt"):
            item.add_marker(pytest.mark.xdist_group(f"spark:{item.path}"))
