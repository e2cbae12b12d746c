"""Bootstrap: pinned jars (Iceberg's and the JDBC drivers) downloaded once and checked,
old-layout catalog in WAL, idempotent re-runs."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lakesync.errors import ConfigError
from lakesync.lakehouse.bootstrap import bootstrap, fetch_jars
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import (
    ICEBERG_JARS,
    ICEBERG_VERSION,
    JDBC_DRIVER_JARS,
    SPARK_JARS,
    LakeSettings,
    MavenJar,
)


@contextmanager
def maven_repository(files: dict[str, bytes]) -> Iterator[str]:
    """A local HTTP server playing a Maven repository that serves ``files`` by path."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/maven2"
    finally:
        server.shutdown()
        server.server_close()


JAR = b"PK not really a jar"
PINNED = MavenJar("org.example", "thing", "1.0", hashlib.sha256(JAR).hexdigest())


def test_jars_are_downloaded_once_checked_and_then_offline(tmp_path: Path) -> None:
    with maven_repository({"/maven2/org/example/thing/1.0/thing-1.0.jar": JAR}) as repo:
        [path] = fetch_jars(tmp_path / "jars", (PINNED,), repo)
    assert path == tmp_path / "jars" / "thing-1.0.jar" and path.read_bytes() == JAR
    # The repository is gone: the jar in place is used as it is.
    assert fetch_jars(tmp_path / "jars", (PINNED,), "http://127.0.0.1:9/none") == [path]


@pytest.mark.parametrize("damage", [JAR[:5], b"PK not really a jaR"], ids=["cut", "changed"])
def test_a_jar_cut_short_or_damaged_in_place_is_fetched_again(
    tmp_path: Path, damage: bytes
) -> None:
    jars = tmp_path / "jars"
    with maven_repository({"/maven2/org/example/thing/1.0/thing-1.0.jar": JAR}) as repo:
        [path] = fetch_jars(jars, (PINNED,), repo)
        path.write_bytes(damage)  # a copy cut short, or a file changed since
        assert fetch_jars(jars, (PINNED,), repo) == [path]
    assert path.read_bytes() == JAR


def test_a_damaged_jar_offline_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "thing-1.0.jar").write_bytes(JAR[:5])
    with pytest.raises(ConfigError) as err:
        fetch_jars(jars, (PINNED,), "http://127.0.0.1:9/maven2")
    for needle in ("org.example:thing:1.0", "python -m lakesync.lakehouse.bootstrap",
                   PINNED.sha256, str(jars / "thing-1.0.jar"), "lake.jars_dir"):
        assert needle in str(err.value)


def test_a_jar_that_does_not_match_its_checksum_is_not_installed(tmp_path: Path) -> None:
    with (
        maven_repository({"/maven2/org/example/thing/1.0/thing-1.0.jar": b"tampered"}) as repo,
        pytest.raises(ConfigError, match="does not match its pinned SHA-256"),
    ):
        fetch_jars(tmp_path, (PINNED,), repo)
    assert list(tmp_path.iterdir()) == []


def test_offline_the_error_names_the_url_and_where_to_put_the_jar(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        fetch_jars(tmp_path, (PINNED,), "http://127.0.0.1:9/maven2")
    assert "http://127.0.0.1:9/maven2/org/example/thing/1.0/thing-1.0.jar" in str(err.value)
    assert str(tmp_path / "thing-1.0.jar") in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_spark_gets_the_official_iceberg_jars() -> None:
    assert [jar.url() for jar in ICEBERG_JARS] == [
        f"https://repo1.maven.org/maven2/org/apache/iceberg/{name}/{ICEBERG_VERSION}/"
        f"{name}-{ICEBERG_VERSION}.jar"
        for name in ("iceberg-spark-runtime-3.5_2.12", "iceberg-aws-bundle")
    ]


def test_spark_gets_the_jdbc_drivers_from_maven_central_not_the_system(tmp_path: Path) -> None:
    assert [(jar.group, jar.artifact) for jar in JDBC_DRIVER_JARS] == [
        ("org.xerial", "sqlite-jdbc"), ("org.postgresql", "postgresql"),
        ("org.mariadb.jdbc", "mariadb-java-client"),
    ]
    settings = LakeSettings.from_env(tmp_path, env={"LAKESYNC_JARS_DIR": str(tmp_path / "j")})
    assert settings.spark_jars == [tmp_path / "j" / jar.file_name for jar in SPARK_JARS]
    assert settings.spark_conf()["spark.jars"] == ",".join(map(str, settings.spark_jars))


def test_bootstrap_creates_catalog_and_landing_idempotently(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path / "d", env={})
    bootstrap(settings)
    bootstrap(settings)
    assert settings.sqlite_path == tmp_path / "d" / "catalog.db"
    con = sqlite3.connect(settings.sqlite_path)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    cols = {r[1] for r in con.execute("PRAGMA table_info(iceberg_tables)")}
    # Old layout: no iceberg_type column, which Spark's catalog would otherwise probe for.
    assert cols == {
        "catalog_name", "table_namespace", "table_name", "metadata_location",
        "previous_metadata_location",
    }
    con.close()
    table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    assert [f.name for f in table.schema().fields][:3] == ["gateway_id", "ingest_hlc", "delta_id"]
    assert (tmp_path / "d" / "warehouse").is_dir()
    assert all(jar.is_file() for jar in settings.spark_jars)
