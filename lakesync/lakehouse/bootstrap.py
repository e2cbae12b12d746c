"""Set up the lake once per machine and data dir; cheap and idempotent on re-run.

``python -m lakesync.lakehouse.bootstrap [--data-dir D]``:

1. downloads the official Iceberg jars Spark loads
   (:data:`~lakesync.lakehouse.settings.ICEBERG_JARS`: the Spark runtime and its AWS bundle,
   pinned by version and SHA-256) from Maven Central into
   :attr:`LakeSettings.jars_dir` (skipped when present, so later runs stay offline);
2. checks the JDBC driver jars are where Spark will look;
3. creates the JDBC catalog tables in Iceberg's older layout (trap 2: Spark then runs with
   ``jdbc.init-catalog-tables=false`` and pyiceberg shares the file), SQLite in WAL mode (not
   for a REST catalog: its server keeps its own tables and warehouse);
4. creates the ``lakesync`` namespace and the landing table.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sqlite3
import urllib.request
from pathlib import Path

from lakesync.errors import ConfigError
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.settings import ICEBERG_JARS, MAVEN_CENTRAL, LakeSettings, MavenJar

__all__ = ["CATALOG_DDL", "bootstrap", "fetch_jars", "init_catalog_tables", "main"]

# Iceberg's pre-1.7 JDBC catalog layout: Spark's JDBC catalog keeps ResultSets open on the newer
# layout's probe queries, which holds a SQLite read lock for the whole session.
CATALOG_DDL = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables ("
    "catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, "
    "table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), "
    "previous_metadata_location VARCHAR(1000), "
    "PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties ("
    "catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL, "
    "property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000), "
    "PRIMARY KEY (catalog_name, namespace, property_key))",
)


def fetch_jars(
    jars_dir: Path, jars: tuple[MavenJar, ...] = ICEBERG_JARS, repository: str = MAVEN_CENTRAL
) -> list[Path]:
    """Download each of ``jars`` from ``repository`` (Maven Central) into ``jars_dir`` unless it
    is there; return their paths. A download is checked against its pinned SHA-256 and renamed
    into place only then, so a jar in ``jars_dir`` is always whole and later runs need no
    network."""
    paths = []
    for jar in jars:
        path = jars_dir / jar.file_name
        if not path.is_file():
            _download(jar.url(repository), jar.sha256, path)
        paths.append(path)
    return paths


def _download(url: str, sha256: str, path: Path) -> None:
    """Fetch ``url`` to ``path`` (see :func:`fetch_jars`); a clear error when offline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own per process: concurrent bootstraps (test workers) never share a file.
    staged = path.with_name(f".{path.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, staged.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:  # URLError, timeouts and refused connections are OSErrors
        staged.unlink(missing_ok=True)
        raise ConfigError(
            f"cannot download {url} ({exc}): Spark needs it; with no network, fetch it "
            f"elsewhere and put it at {path}"
        ) from None
    if digest.hexdigest() != sha256:
        staged.unlink(missing_ok=True)
        raise ConfigError(
            f"{url} does not match its pinned SHA-256 {sha256} (got "
            f"{digest.hexdigest()}): not installed"
        )
    staged.replace(path)


def init_catalog_tables(settings: LakeSettings) -> None:
    """Create the catalog tables (old layout) if missing; SQLite gets WAL so readers never block.
    A REST catalog has none to create."""
    if settings.is_rest:
        return
    if settings.is_sqlite:
        settings.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(settings.sqlite_path)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            for ddl in CATALOG_DDL:
                con.execute(ddl)
            con.commit()
        finally:
            con.close()
        return
    # heavy, optional (extra "pipeline", via pyiceberg)
    import sqlalchemy  # noqa: PLC0415

    engine = sqlalchemy.create_engine(settings.sqlalchemy_uri())
    try:
        with engine.begin() as conn:
            for ddl in CATALOG_DDL:
                conn.execute(sqlalchemy.text(ddl))
    finally:
        engine.dispose()


def check_jars(settings: LakeSettings) -> None:
    """Fail early, naming the package to install, when a JDBC driver jar Spark needs is
    missing (the Iceberg jars are downloaded by :func:`fetch_jars`)."""
    hints = {
        "sqlite-jdbc.jar": "apt-get install libxerial-sqlite-jdbc-java",
        "postgresql.jar": "apt-get install libpostgresql-jdbc-java",
    }
    for jar in settings.spark_jars:
        if not jar.is_file():
            hint = hints.get(jar.name, "python -m lakesync.lakehouse.bootstrap")
            raise ConfigError(f"missing jar {jar} ({hint})")


def bootstrap(settings: LakeSettings) -> LakeSettings:
    """Run every setup step for ``settings`` (see the module docstring); safe to call repeatedly."""
    fetch_jars(settings.jars_dir)
    check_jars(settings)
    if not settings.is_rest and (wh := settings.warehouse_path) is not None:
        wh.mkdir(parents=True, exist_ok=True)
    init_catalog_tables(settings)
    ensure_landing_table(open_catalog(settings))
    return settings


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: ``python -m lakesync.lakehouse.bootstrap [--data-dir D]``."""
    parser = argparse.ArgumentParser(
        prog="python -m lakesync.lakehouse.bootstrap", description=__doc__
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help="data dir (default $LAKESYNC_DATA_DIR or ./.lakesync)",
    )
    parser.add_argument(
        "--print-env", action="store_true",
        help="print `export` lines of the environment profiles.yml reads (for a plain dbt build)",
    )
    args = parser.parse_args(argv)
    settings = bootstrap(LakeSettings.from_env(args.data_dir))
    if args.print_env:
        for key, value in settings.dbt_env().items():
            print(f"export {key}={shlex.quote(value)}")
        return
    print(
        f"lake ready: catalog {settings.catalog_uri}, warehouse {settings.warehouse}, "
        f"jars {settings.jars_dir}"
    )


if __name__ == "__main__":
    main()
