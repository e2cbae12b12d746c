"""The DuckDB connection the lake is read through, offline: no Spark, no JVM.

Every table in the catalog becomes a DuckDB view over ``iceberg_scan(<current metadata file>)``,
named ``<namespace>.<table>`` (``analytics.todos``, ``lakesync.landing``); tables of the
``lakesync`` namespace are also visible unqualified (``landing``, ``int_cells_merged``).
:mod:`lakesync.lakehouse.query` runs SQL on it, :mod:`lakesync.lakehouse.fresh` replaces its
analytics views and :mod:`lakesync.lakehouse.checkpoint_builder` reads the merged rows from it: this
module is below all three (it imports none of them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from lakesync.errors import NotFoundError
from lakesync.lakehouse.catalog import ROWS_MERGED_IDENTIFIER, open_catalog, require_lake
from lakesync.lakehouse.object_store import duckdb_s3_secret, vended_s3
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.sql_ast import table as sql_table

if TYPE_CHECKING:
    from pyiceberg.table import Table

__all__ = [
    "PinnedTable", "connect", "create_view", "open_duckdb", "pinned_connection", "scan_sql", "utc"
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DUCKDB = "duckdb"


def _extension_path(module: Any, name: str, version: str) -> Path:
    return (
        Path(module.__file__).parent
        / "extensions"
        / f"v{version}"
        / (f"{name}.duckdb_extension")
    )


def _load(extension: Path) -> str:
    # DuckDB's LOAD of a file: no sqlglot node, the path a quoted literal all the same.
    return f"LOAD {exp.Literal.string(str(extension)).sql(dialect=_DUCKDB)}"


def open_duckdb() -> Any:
    """An in-memory DuckDB connection that reads Iceberg (the avro and iceberg extensions
    loaded) and returns timestamps in UTC: what every lake read starts from."""
    # DuckDB and its extensions: heavy, optional (extra "pipeline"); kept out of the CLI's start.
    import duckdb  # noqa: PLC0415
    import duckdb_extension_avro  # type: ignore[import-untyped]  # noqa: PLC0415
    import duckdb_extension_iceberg  # type: ignore[import-untyped]  # noqa: PLC0415

    # A signed extension is verified by hashing its whole file at each LOAD: 0.1 to 0.4 s for
    # iceberg's 50 MB, the largest part of a small query. The binaries come from the wheels just
    # imported, whose own Python code already runs unverified, so the check proves nothing more.
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    try:
        # Timestamps are instants: they come back as aware datetimes in UTC, whatever the zone.
        con.execute("SET TimeZone = 'UTC'")
        # The extension wheels ship the binaries; DuckDB cannot download them on these machines.
        for module, ext in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
            con.execute(_load(_extension_path(module, ext, duckdb.__version__)))
    except BaseException:
        con.close()
        raise
    return con


def scan_sql(metadata_location: str, snapshot_id: int | None = None) -> exp.Select:
    """The SELECT of a table's rows as its metadata file says (at ``snapshot_id`` when given)."""
    args: list[exp.Expression] = [exp.Literal.string(metadata_location)]
    if snapshot_id is not None:
        args.append(
            exp.Kwarg(this=exp.var("snapshot_from_id"), expression=exp.Literal.number(snapshot_id))
        )
    return exp.select(exp.Star()).from_(
        exp.Table(this=exp.Anonymous(this="iceberg_scan", expressions=args))
    )


def _create_schema(schema: str) -> str:
    return exp.Create(this=sql_table(schema), kind="SCHEMA", exists=True).sql(dialect=_DUCKDB)


def create_view(con: Any, qualified: str, scan: exp.Select) -> None:
    """Make the table ``qualified`` (``namespace.table``) a view of ``scan`` on ``con``, its
    schema created if missing; a table of the ``lakesync`` namespace is also visible
    unqualified (``landing``)."""
    schema, name = qualified.rsplit(".", 1)
    con.execute(_create_schema(schema))
    views = [sql_table(schema, name)] + [sql_table("main", name)] * (schema == LANDING_NAMESPACE)
    for view in views:
        con.execute(
            exp.Create(this=view, kind="VIEW", expression=scan.copy()).sql(dialect=_DUCKDB)
        )


def _read_s3(con: Any, settings: LakeSettings, tables: Iterable[Table]) -> None:
    """Let ``con`` read the ``s3://`` warehouse: DuckDB's S3 support (``httpfs``; ``aws`` too
    when the credentials come from the AWS chain) and a secret scoped to the warehouse, plus one
    scoped to each of ``tables`` a REST catalog vended credentials for (DuckDB takes the
    longest matching scope)."""
    import duckdb  # noqa: PLC0415  # heavy, optional (extra "pipeline")
    import duckdb_extension_aws  # type: ignore[import-untyped]  # noqa: PLC0415
    import duckdb_extension_httpfs  # type: ignore[import-untyped]  # noqa: PLC0415

    vended = [(table.location(), vended_s3(settings.s3, table.io.properties)) for table in tables]
    # The AWS chain only for what no vended credentials cover (DuckDB refuses a chain secret
    # that finds no credentials).
    chain = not (settings.s3.access_key_id or settings.s3.secret_access_key)
    warehouse_wide = not vended or not chain or any(s3 is None for _, s3 in vended)
    modules = [(duckdb_extension_httpfs, "httpfs")]
    if chain and warehouse_wide:
        modules.append((duckdb_extension_aws, "aws"))
    for module, ext in modules:
        con.execute(_load(_extension_path(module, ext, duckdb.__version__)))
    if warehouse_wide:
        con.execute(duckdb_s3_secret(settings.s3, settings.warehouse))
    for n, (location, s3) in enumerate(vended):
        if s3 is not None:
            con.execute(duckdb_s3_secret(s3, location, name=f"lake_s3_{n}"))


def utc(instant: datetime) -> datetime:
    """``instant`` in UTC (a naive datetime is taken as UTC)."""
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


def _snapshot_list(table: Table) -> str:
    recent = sorted(table.snapshots(), key=lambda snap: snap.timestamp_ms)[-5:]
    listed = ", ".join(
        f"{snap.snapshot_id} ({(_EPOCH + timedelta(milliseconds=snap.timestamp_ms)).isoformat()})"
        for snap in reversed(recent)
    )
    return f"newest snapshots: {listed}" if listed else "it has no snapshots"


def _scan(
    name: str, table: Table, pin: int | None, as_of_ms: int | None
) -> exp.Select | None:
    """The SELECT behind ``name``'s view, or None when it had no snapshot at ``as_of_ms``."""
    if pin is not None:
        if table.snapshot_by_id(pin) is None:
            raise NotFoundError(f"table {name} has no snapshot {pin}; {_snapshot_list(table)}")
        snapshot_id = pin
    elif as_of_ms is not None:
        snapshot = table.snapshot_as_of_timestamp(as_of_ms)
        if snapshot is None:
            return None
        snapshot_id = snapshot.snapshot_id
    else:
        return scan_sql(table.metadata_location)
    return scan_sql(table.metadata_location, snapshot_id)


@dataclass(frozen=True, slots=True)
class PinnedTable:
    """A catalog table as one connection's view reads it: its metadata as loaded when the view
    was made (snapshots, properties) and the SELECT behind the view."""

    table: Table
    scan: exp.Select


def pinned_connection(
    settings: LakeSettings, as_of: datetime | None, snapshots: Mapping[str, int]
) -> tuple[Any, list[str], dict[str, PinnedTable]]:
    """The connection of :func:`connect`, the tables left out because ``as_of`` predates them,
    and every view's table as pinned (by qualified name)."""
    require_lake(settings)
    catalog = open_catalog(settings)
    idents = [ident for ns in catalog.list_namespaces() for ident in catalog.list_tables(ns)]
    # The merged rows first: a fresh read takes the position they cover as merged, and every
    # model view loaded after them is at least that new (lakehouse.fresh).
    idents.sort(key=lambda ident: ".".join(ident) != ROWS_MERGED_IDENTIFIER)
    loaded = {".".join(ident): catalog.load_table(ident) for ident in idents}
    known = sorted(loaded)
    unknown = sorted(set(snapshots) - set(known))
    if unknown:
        raise NotFoundError(f"no table {unknown[0]} in the lake; tables: {', '.join(known)}")
    as_of_ms = None if as_of is None else (utc(as_of) - _EPOCH) // timedelta(milliseconds=1)
    con = open_duckdb()
    absent: list[str] = []
    pinned: dict[str, PinnedTable] = {}
    try:
        if settings.on_object_store:
            _read_s3(con, settings, loaded.values())
        for qualified, table in loaded.items():
            schema = qualified.rsplit(".", 1)[0]
            con.execute(_create_schema(schema))
            scan = _scan(qualified, table, snapshots.get(qualified), as_of_ms)
            if scan is None:
                absent.append(qualified)
                continue
            pinned[qualified] = PinnedTable(table, scan)
            create_view(con, qualified, scan)
    except BaseException:
        con.close()
        raise
    return con, absent, pinned


def connect(
    settings: LakeSettings,
    *,
    as_of: datetime | None = None,
    snapshots: Mapping[str, int] | None = None,
) -> Any:
    """An in-memory DuckDB connection with a view per catalog table (see the module docstring).

    ``as_of`` shows every table as it was at that instant (a naive datetime is UTC); a table with
    no snapshot at or before it (not created yet, still empty, or its snapshots expired) has no
    view. ``snapshots`` maps qualified table names (``lakesync.landing``) to the snapshot id to
    show, over ``as_of``. An unknown table or snapshot id raises :class:`NotFoundError`.
    """
    con, _, _ = pinned_connection(settings, as_of, snapshots or {})
    return con
