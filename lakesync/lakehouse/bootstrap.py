"""Set up the lake once per machine and data dir; cheap and idempotent on re-run.

``python -m lakesync.lakehouse.bootstrap [--data-dir D]``:

1. downloads the official jars Spark loads (:data:`~lakesync.lakehouse.settings.SPARK_JARS`:
   the Iceberg Spark runtime, its AWS bundle and the JDBC drivers of SQLite, PostgreSQL and
   MariaDB, pinned by version and SHA-256) from Maven Central into
   :attr:`LakeSettings.jars_dir` (skipped when present and whole, so later runs stay offline);
2. creates the JDBC catalog tables in Iceberg's older layout (trap 2: Spark then runs with
   ``jdbc.init-catalog-tables=false`` and pyiceberg shares the file), SQLite in WAL mode (not
   for a REST catalog: its server keeps its own tables and warehouse);
3. checks the lake's storage (:func:`check_storage`: the bucket exists; a REST catalog puts
   the tables under ``lake.warehouse``);
4. creates the ``lakesync`` namespace and the landing table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import shlex
import sqlite3
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lakesync.errors import ConfigError
from lakesync.lakehouse.catalog import (
    CatalogUnavailableError,
    catalog_failure,
    ensure_landing_table,
    open_catalog,
)
from lakesync.lakehouse.object_store import missing_bucket
from lakesync.lakehouse.settings import MAVEN_CENTRAL, SPARK_JARS, LakeSettings, MavenJar

__all__ = [
    "CATALOG_DDL", "FetchProgress", "bootstrap", "check_storage", "fetch_jars",
    "init_catalog_tables", "main", "missing_jars",
]

_log = logging.getLogger(__name__)

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


FetchProgress = Callable[[MavenJar, int], None]
"""Called as a jar downloads, with the bytes of it received so far."""


def missing_jars(jars_dir: Path, jars: tuple[MavenJar, ...] = SPARK_JARS) -> list[MavenJar]:
    """Those of ``jars`` that :func:`fetch_jars` would download (not whole in ``jars_dir``)."""
    return [jar for jar in jars if not _is_whole(jars_dir / jar.file_name, jar.sha256)]


def fetch_jars(
    jars_dir: Path,
    jars: tuple[MavenJar, ...] = SPARK_JARS,
    repository: str = MAVEN_CENTRAL,
    on_progress: FetchProgress | None = None,
) -> list[Path]:
    """Download each of ``jars`` from ``repository`` (Maven Central) into ``jars_dir`` unless a
    whole copy is there; return their paths. ``on_progress`` hears of each download as it goes.

    A download is checked against its pinned SHA-256 and renamed into place only then; a jar
    already in ``jars_dir`` is checked too (a copy cut short or damaged is fetched again), so
    later runs need no network. Offline with a jar missing, a :class:`ConfigError` says where to
    put it.
    """
    paths = []
    for jar in jars:
        path = jars_dir / jar.file_name
        if not _is_whole(path, jar.sha256):
            if path.exists():
                _log.warning("%s does not match its pinned SHA-256: fetching it again", path)
            _download(jar, jar.url(repository), path, on_progress)
        paths.append(path)
    return paths


def _is_whole(path: Path, sha256: str) -> bool:
    """Whether the file at ``path`` has the digest ``sha256``. A stamp beside it remembers a
    passed check with the file's size and mtime, so a pipeline run does not read 130 MB of jars
    again; any write to the jar changes those and misses the stamp."""
    if not path.is_file():
        return False
    stamp, checked = _stamp(path, sha256)
    try:
        if stamp.read_text(encoding="utf-8") == checked:
            return True
    except OSError:
        pass
    if _sha256(path) != sha256:
        return False
    with contextlib.suppress(OSError):  # a read-only jars dir: check again next time
        stamp.write_text(checked, encoding="utf-8")
    return True


def _stamp(path: Path, sha256: str) -> tuple[Path, str]:
    """The stamp file of the jar at ``path`` and what it holds once the jar is checked."""
    stat = path.stat()
    return path.with_name(f".{path.name}.sha256"), f"{sha256} {stat.st_size} {stat.st_mtime_ns}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as jar:
        while chunk := jar.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _download(jar: MavenJar, url: str, path: Path, on_progress: FetchProgress | None) -> None:
    """Fetch ``url`` to ``path`` (see :func:`fetch_jars`); a clear error when offline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own per process: concurrent bootstraps (test workers) never share a file.
    staged = path.with_name(f".{path.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, staged.open("wb") as out:
            received = 0
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
                if on_progress is not None:
                    on_progress(jar, received)
    except OSError as exc:  # URLError, timeouts and refused connections are OSErrors
        staged.unlink(missing_ok=True)
        raise ConfigError(
            f"cannot download {url} ({exc}): Spark needs "
            f"{jar.group}:{jar.artifact}:{jar.version}. Run `python -m "
            "lakesync.lakehouse.bootstrap` (or scripts/setup.sh) once where Maven Central is "
            f"reachable, or, offline, copy that jar (SHA-256 {jar.sha256}) to {path} or point "
            "lake.jars_dir at a folder that has it"
        ) from None
    if digest.hexdigest() != jar.sha256:
        staged.unlink(missing_ok=True)
        raise ConfigError(
            f"{url} does not match its pinned SHA-256 {jar.sha256} (got "
            f"{digest.hexdigest()}): not installed"
        )
    staged.replace(path)
    stamp, checked = _stamp(path, jar.sha256)
    stamp.write_text(checked, encoding="utf-8")


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


def check_storage(settings: LakeSettings) -> None:
    """Refuse, in one line, a lake whose tables would not be where ``lake.warehouse`` says:
    its bucket does not exist (:class:`~lakesync.lakehouse.object_store.ObjectStoreError`), or a
    REST catalog creates them under its own warehouse, not the declared one
    (:class:`~lakesync.errors.ConfigError`: a REST catalog decides where its tables go). A
    catalog or store that cannot be reached now is left to the flusher and the pipeline, which
    say so when they use it."""
    missing = missing_bucket(settings.warehouse, settings.s3)
    if missing is not None:
        raise missing
    if not (settings.is_rest and settings.warehouse_declared):
        return
    try:
        catalog = open_catalog(settings)
    except CatalogUnavailableError:
        return
    try:
        location = ensure_landing_table(catalog).location()
    except Exception as exc:
        if catalog_failure(exc, catalog) is not None:
            return  # unreachable now: the flusher says so and tries again
        raise
    if not settings.holds(location):
        raise ConfigError(
            f"lake.warehouse is {settings.warehouse} but the REST catalog at "
            f"{settings.catalog_uri} creates the lake's tables under its own warehouse (the "
            f"landing table is at {location}): set lake.warehouse to that warehouse (or unset "
            "it), or give the catalog server the declared one as its warehouse (with "
            "lake.catalog_warehouse naming it, if the server serves several)"
        )


def bootstrap(settings: LakeSettings) -> LakeSettings:
    """Run every setup step for ``settings`` (see the module docstring), checking the lake's
    storage first (:func:`check_storage`); safe to call repeatedly."""
    fetch_jars(settings.jars_dir)
    if not settings.is_rest and (wh := settings.warehouse_path) is not None:
        wh.mkdir(parents=True, exist_ok=True)
    init_catalog_tables(settings)
    check_storage(settings)
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
