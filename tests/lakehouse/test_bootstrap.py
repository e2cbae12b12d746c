"""Bootstrap: relocated Jackson jar, old-layout catalog in WAL, idempotent re-runs."""

from __future__ import annotations

import sqlite3
import zipfile
from pathlib import Path

from lakesync.lakehouse.bootstrap import bootstrap, build_jackson_jar
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings


def test_jackson_jar_is_relocated_and_reused(tmp_path: Path) -> None:
    out = tmp_path / "jars" / "jackson.jar"
    build_jackson_jar(out)
    with zipfile.ZipFile(out) as jar:
        names = jar.namelist()
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class" in names
    assert not any(n.startswith("com/fasterxml/") for n in names)
    assert not any(n.startswith("META-INF/versions/") or n.endswith(".SF") for n in names)
    mtime = out.stat().st_mtime_ns
    build_jackson_jar(out)
    assert out.stat().st_mtime_ns == mtime


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
