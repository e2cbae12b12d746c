"""Set up the lake once per machine and data dir; cheap and idempotent on re-run.

``python -m lakesync.lakehouse.bootstrap [--data-dir D]``:

1. builds the relocated Jackson jar the stripped Iceberg runtime needs (STACK.md trap 1) from
   pyspark's own Jackson jars with Debian's jarjar, into :attr:`LakeSettings.jars_dir`
   (skipped when present);
2. checks the Iceberg runtime and JDBC driver jars are where Spark will look;
3. creates the JDBC catalog tables in Iceberg's older layout (trap 2: Spark then runs with
   ``jdbc.init-catalog-tables=false`` and pyiceberg shares the file), SQLite in WAL mode (not
   for a REST catalog: its server keeps its own tables and warehouse);
4. creates the ``lakesync`` namespace and the landing table.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import zipfile
from pathlib import Path

from lakesync.errors import ConfigError
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.settings import LakeSettings

__all__ = ["CATALOG_DDL", "bootstrap", "build_jackson_jar", "init_catalog_tables", "main"]

JACKSON_JARS = (
    "jackson-core-2.15.2.jar",
    "jackson-databind-2.15.2.jar",
    "jackson-annotations-2.15.2.jar",
    "jackson-datatype-jsr310-2.15.2.jar",
)
JARJAR_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1\n"
DEBIAN_JAVA = Path("/usr/share/java")

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


def _skip_entry(name: str) -> bool:
    """Entries that would break the merged jar (multi-release, SPI, module-info, signatures)."""
    upper = name.upper()
    return (
        name.startswith(("META-INF/versions/", "META-INF/services/"))
        or name.endswith("module-info.class")
        or name == "META-INF/MANIFEST.MF"
        or (upper.startswith("META-INF/") and upper.endswith((".SF", ".DSA", ".RSA", ".EC")))
    )


def build_jackson_jar(out: Path) -> Path:
    """Build the relocated Jackson jar at ``out`` unless it already exists; return its path."""
    if out.is_file() and out.stat().st_size > 0:
        return out
    # heavy, optional (extra "pipeline")
    import pyspark  # noqa: PLC0415

    spark_jars = Path(pyspark.__file__).parent / "jars"
    jarjar = DEBIAN_JAVA / "jarjar.jar"
    asm = sorted(DEBIAN_JAVA.glob("asm*.jar"))
    if not jarjar.is_file() or not asm:
        raise ConfigError("jarjar/asm missing: apt-get install libjarjar-java libasm-java")
    java = shutil.which("java")
    if java is None:
        raise ConfigError("java not found: install a JDK 17 (openjdk-17-jdk-headless)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakesync-jars-") as tmp:
        merged = Path(tmp) / "jackson-merged.jar"
        seen: set[str] = set()
        with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as dst:
            dst.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for name in JACKSON_JARS:
                with zipfile.ZipFile(spark_jars / name) as src:
                    for info in src.infolist():
                        if info.is_dir() or _skip_entry(info.filename) or info.filename in seen:
                            continue
                        seen.add(info.filename)
                        dst.writestr(info.filename, src.read(info))
        rules = Path(tmp) / "rules.txt"
        rules.write_text(JARJAR_RULE)
        relocated = Path(tmp) / "relocated.jar"
        classpath = ":".join(str(p) for p in [jarjar, *asm])
        subprocess.run(
            [java, "-cp", classpath, "com.tonicsystems.jarjar.Main", "process", str(rules),
             str(merged), str(relocated)],
            check=True, capture_output=True,
        )
        # Rename into place so a concurrent or interrupted bootstrap never leaves half a jar.
        staged = out.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(relocated, staged)
        staged.replace(out)
    return out


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
    """Fail early, naming the package to install, when a jar Spark needs is missing."""
    hints = {
        "sqlite-jdbc.jar": "apt-get install libxerial-sqlite-jdbc-java",
        "postgresql.jar": "apt-get install libpostgresql-jdbc-java",
    }
    for jar in settings.spark_jars:
        if not jar.is_file():
            hint = hints.get(jar.name, "pip install -e '.[pipeline]'")
            raise ConfigError(f"missing jar {jar} ({hint})")


def bootstrap(settings: LakeSettings) -> LakeSettings:
    """Run every setup step for ``settings`` (see the module docstring); safe to call repeatedly."""
    build_jackson_jar(settings.jackson_jar)
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
