"""The lake on an Iceberg REST catalog, no Spark: Apache Iceberg's own REST catalog server
(tests/rest_catalog.py), pyiceberg's landing flush and ``lakesync query`` (DuckDB) through it (on
local files, and on S3 with the storage credentials the catalog vends), and what a refused
credential or token, or an unreachable server, tells the user (never a secret)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.errors import ConfigError
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, ensure_landing_table, open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema
from tests.api.helpers import now_hlc
from tests.conftest import fresh_s3_bucket, s3_client, s3_lake_env
from tests.rest_catalog import (
    REST_CATALOG_URI,
    AuthProxy,
    require_rest_catalog,
    rest_catalog_server,
    s3_catalog_env,
)

GW = "gwrest"
NOTES = parse_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})
TOKEN = "tok-3f9a71c2e8"
CREDENTIAL = "lakesync-client:s3cr3t-5be1d0"


@pytest.fixture(scope="module")
def rest_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A REST catalog server of this module's own."""
    with rest_catalog_server(tmp_path_factory.mktemp("rest")) as uri:
        yield uri


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAKESYNC_CONFIG", "LAKESYNC_STORE_URL", "LAKESYNC_CATALOG_CREDENTIAL",
                 "LAKESYNC_CATALOG_TOKEN", "LAKESYNC_CATALOG_WAREHOUSE", "LAKESYNC_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)


def _d(op: str, row: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, "notes", row, "c1", cols, hlc)  # type: ignore[arg-type]


def test_the_landing_flush_and_lakesync_query_go_through_the_rest_catalog(
    rest_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    """``lake.catalog_uri: http://…`` alone: the flush commits through the REST server, and
    ``lakesync query`` (plain and ``--fresh``) reads the tables it lists; no SQLite catalog
    appears in the data dir."""
    monkeypatch.setenv("LAKESYNC_CATALOG_URI", rest_uri)
    settings = LakeSettings.from_env(tmp_path)
    assert settings.is_rest and settings.spark_conf()["spark.sql.catalog.lake.type"] == "rest"
    init_catalog_tables(settings)  # nothing to create for a REST catalog
    catalog = open_catalog(settings)
    ensure_landing_table(catalog)
    publish_schemas(catalog, [(GW, NOTES)])
    log = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
    try:
        t = now_hlc()
        log.append(GW, [_d("INSERT", "n1", t + 1, body="landed")])
        LandingFlusher(open_catalog(settings), log).flush()
        log.append(GW, [_d("UPDATE", "n1", t + 2, body="hot")])
    finally:
        log.close()
    table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    assert table.metadata_location.startswith("file:")
    assert not (tmp_path / "catalog.db").exists()

    def printed(sql: str, *flags: str) -> list[dict[str, Any]]:
        args = ["query", sql, "--data-dir", str(tmp_path), "--format", "json", *flags]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]

    landed = printed("select row_id, columns_json from landing where gateway_id = 'gwrest'")
    assert [r["row_id"] for r in landed] == ["n1"]
    fresh = printed("select row_id, body from analytics.notes", "--fresh")
    assert fresh == [{"row_id": "n1", "body": "hot"}]


@pytest.mark.parametrize("how", ["token", "credential"])
def test_the_right_token_or_credential_signs_in(
    rest_uri: str, tmp_path: Path, how: str, clean_env: None
) -> None:
    with AuthProxy(rest_uri, TOKEN, CREDENTIAL) as proxy:
        value = TOKEN if how == "token" else CREDENTIAL
        settings = LakeSettings.from_env(tmp_path, env={
            "LAKESYNC_CATALOG_URI": proxy.uri, f"LAKESYNC_CATALOG_{how.upper()}": value,
        })
        catalog = open_catalog(settings)
        ensure_landing_table(catalog)
        assert ("lakesync",) in catalog.list_namespaces()
        assert proxy.refused == 0


@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("LAKESYNC_CATALOG_TOKEN", "tok-wrong-77aa", "lake.catalog_token"),
        ("LAKESYNC_CATALOG_CREDENTIAL", "lakesync-client:wrong-91", "lake.catalog_credential"),
        ("LAKESYNC_CATALOG_CREDENTIAL", "other-client:s3cr3t-5be1d0", "lake.catalog_credential"),
    ],
)
def test_a_refused_token_or_credential_is_a_clear_error_without_the_secret(
    rest_uri: str, tmp_path: Path, variable: str, value: str, names: str,
    monkeypatch: pytest.MonkeyPatch, clean_env: None,
) -> None:
    """The library and the CLI both say the catalog refused the credentials and which key to
    check; neither the secret nor the right one appears (``lakesync query`` exits 2)."""
    with AuthProxy(rest_uri, TOKEN, CREDENTIAL) as proxy:
        env = {"LAKESYNC_CATALOG_URI": proxy.uri, variable: value}
        with pytest.raises(ConfigError) as raised:
            open_catalog(LakeSettings.from_env(tmp_path, env=env))
        message = raised.value.message
        assert f"the REST catalog at {proxy.uri} refused the lake's credentials" in message
        assert names in message
        for monkey_var, monkey_value in env.items():
            monkeypatch.setenv(monkey_var, monkey_value)
        result = CliRunner().invoke(
            app, ["query", "select 1", "--data-dir", str(tmp_path)]
        )
        assert result.exit_code == 2  # a configuration to fix, as every ConfigError
        assert "refused the lake's credentials" in result.output and names in result.output
        assert proxy.refused >= 2
    secret = value.split(":", 1)[-1]
    for text in (message, result.output):
        assert secret not in text and value not in text
        assert TOKEN not in text and CREDENTIAL.split(":")[1] not in text


def test_an_unreachable_rest_catalog_names_the_uri_to_check(
    tmp_path: Path, clean_env: None
) -> None:
    settings = LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_CATALOG_URI": "http://127.0.0.1:9", "LAKESYNC_CATALOG_TOKEN": TOKEN,
    })
    with pytest.raises(ConfigError, match=r"cannot reach the REST catalog at http://127\.0\.0\.1:9"
                       r".*lake\.catalog_uri") as raised:
        open_catalog(settings)
    assert TOKEN not in raised.value.message


def test_the_services_rest_catalog_answers() -> None:
    """``scripts/services.sh`` started the shared server (``LAKESYNC_TEST_REST_CATALOG_URI``)."""
    require_rest_catalog()
    if not REST_CATALOG_URI:
        pytest.skip("LAKESYNC_TEST_REST_CATALOG_URI is not set (scripts/services.sh)")
    settings = LakeSettings.from_env(Path("unused"), env={"LAKESYNC_CATALOG_URI": REST_CATALOG_URI})
    assert isinstance(open_catalog(settings).list_namespaces(), list)


def test_on_s3_the_lake_reads_and_writes_with_the_credentials_the_catalog_vends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    """The REST server's warehouse is on S3 and it vends its S3 keys with each table; the lake
    is told the endpoint but no keys (and no AWS chain has any): the landing flush (pyiceberg)
    and a fresh ``lakesync query`` (DuckDB) work with the vended ones, and every file lands in
    the bucket."""
    bucket = fresh_s3_bucket()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    server_env = s3_catalog_env()  # it vends its keys in every LoadTable answer
    lake_env = {k: v for k, v in s3_lake_env(bucket).items() if "_KEY" not in k}
    with rest_catalog_server(tmp_path / "rest", f"s3://{bucket}/lake", server_env) as uri:
        settings = LakeSettings.from_env(
            tmp_path / "data", env={**lake_env, "LAKESYNC_CATALOG_URI": uri}
        )
        assert settings.on_object_store and settings.s3.access_key_id is None
        catalog = open_catalog(settings)
        ensure_landing_table(catalog)
        publish_schemas(catalog, [(GW, NOTES)])
        log = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
        try:
            t = now_hlc()
            log.append(GW, [_d("INSERT", "n1", t + 1, body="landed")])
            log.append(GW, [_d("INSERT", "n2", t + 2, body="two")])
            LandingFlusher(open_catalog(settings), log).flush()
            log.append(GW, [_d("UPDATE", "n1", t + 3, body="hot")])
            sql = "select row_id, body from analytics.notes order by row_id"
            rows = run_query(settings, sql, fresh=True, hot_log=log).rows
        finally:
            log.close()
        landing = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    assert rows == [("n1", "hot"), ("n2", "two")]
    assert landing.metadata_location.startswith(f"s3://{bucket}/lake/")
    keys = [o["Key"] for o in s3_client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.endswith(".parquet") for k in keys) and any(k.endswith(".avro") for k in keys)
    assert not (tmp_path / "data" / "warehouse").exists()
