"""pyiceberg access to the lake's catalog, and the landing table's schema.

A JDBC catalog: pyiceberg's ``SqlCatalog`` and Spark's ``JdbcCatalog`` share the same catalog
tables (old layout, created by the bootstrap), so the catalog name must equal Spark's (``lake``).
An Iceberg REST catalog (``lake.catalog_uri: http(s)://...``): pyiceberg's ``RestCatalog`` and
Spark's REST client talk to the same server.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sqlite3
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakesync.errors import ConfigError, NotFoundError, first_line, is_outage_sqlstate
from lakesync.lakehouse.object_store import pyiceberg_s3_properties
from lakesync.lakehouse.settings import CATALOG_NAME, LANDING_NAMESPACE, LANDING_TABLE, LakeSettings
from lakesync.redaction import Redactor

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "CHANGE_KEYS",
    "COVERED_PROPERTY",
    "HELD_PROPERTY",
    "LANDED_LATE_PROPERTY",
    "LANDING_IDENTIFIER",
    "LATE_SEQUENCE_PROPERTY",
    "POSITION_PROPERTY",
    "CatalogUnavailableError",
    "catalog_failure",
    "catalog_opener",
    "changes_data",
    "deferred_catalog",
    "ensure_landing_table",
    "flushed_position",
    "issued_tokens",
    "landing_schema",
    "landing_state",
    "late_landing_sequence",
    "open_catalog",
    "remember_late_landings",
    "require_lake",
    "sql_catalog_failure",
    "table_locations",
]

LANDING_IDENTIFIER = f"{LANDING_NAMESPACE}.{LANDING_TABLE}"
ROWS_MERGED_IDENTIFIER = f"{LANDING_NAMESPACE}.int_rows_merged"
"""The merged models' row clocks (the dbt model ``int_rows_merged``)."""
COVERED_PROPERTY = "lakesync.covered"
"""Table property of ``int_rows_merged``: what the last successful pipeline run is complete
through, as JSON ``{"position": P, "held": {gateway: P_gw}}`` (the landing state it started
from): every delta of a gateway ingested at or before ``held.get(gateway, position)`` is merged
into the models. Checkpoints record it (:mod:`lakesync.lakehouse.checkpoint_builder`)."""
CHANGE_KEYS = (
    "added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files"
)
"""Snapshot summary keys counting the files a commit added or removed."""


def changes_data(snapshot: Snapshot) -> bool:
    """Whether ``snapshot`` added or removed any data or delete file (a MERGE that matched
    nothing commits a snapshot that changes none)."""
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    return any(int(props.get(key, "0")) > 0 for key in CHANGE_KEYS)

# Snapshot summary key: the hot-log position (ingest HLC) the landing table is complete through.
POSITION_PROPERTY = "lakesync.flushed-through"
# Next to it when some gateways' rows could not be written: JSON {gateway id: the position that
# gateway is complete through}; its entries after that wait in the hot log (see landing.py).
HELD_PROPERTY = "lakesync.held-back"
# On a commit of a held-back gateway's entries that land after later ones: the lowest ingest HLC
# among them. Incremental models may have passed it: the pipeline then rebuilds them in full.
LANDED_LATE_PROPERTY = "lakesync.landed-late"
# Landing table property: the greatest sequence number of a commit that landed rows late, kept by
# compaction before it may expire that commit's snapshot (the pipeline then still rebuilds).
LATE_SEQUENCE_PROPERTY = "lakesync.landed-late-sequence"


class _QuietV0Layout(logging.Filter):
    """Drop pyiceberg's notice about the old catalog layout: it is deliberate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "v0 schema" not in record.getMessage()


logging.getLogger("pyiceberg.catalog.sql").addFilter(_QuietV0Layout())


class CatalogUnavailableError(ConfigError):
    """The lake's REST catalog could not be reached, refused the lake's credential or could not
    be opened, or the database of its JDBC catalog could not be reached; the message names the
    URI and the key to check (never a secret). A
    :class:`~lakesync.errors.ConfigError` (the command line exits 2: a setting to check), but
    answered 502 by the gateway, whose flushes try again until the catalog is back."""

    code = "CATALOG_ERROR"
    status = 502


def catalog_opener(catalog: Catalog | Callable[[], Catalog]) -> Callable[[], Catalog]:
    """``catalog`` as a callable returning it: a catalog as is, or an opener (such as
    :func:`deferred_catalog`'s) called on each use."""
    if callable(catalog):
        return catalog
    return lambda: catalog


def deferred_catalog(settings: LakeSettings) -> Callable[[], Catalog]:
    """An opener of ``settings``' catalog that opens it on its first successful call and keeps
    it. Until then each call tries again, raising :class:`CatalogUnavailableError` while a REST
    catalog is unreachable or refuses the credential: a gateway starts without its catalog
    and each scheduled flush tries it again."""
    opened: list[Catalog] = []
    lock = threading.Lock()

    def catalog() -> Catalog:
        with lock:
            if not opened:
                opened.append(open_catalog(settings))
            return opened[0]

    return catalog


def open_catalog(settings: LakeSettings) -> Catalog:
    """The lake's catalog as Spark sees it: a pyiceberg ``SqlCatalog`` over the same JDBC catalog
    tables and warehouse, or a ``RestCatalog`` on the same REST catalog server (on S3 with the
    warehouse's FileIO properties)."""
    if settings.is_rest:
        return _open_rest_catalog(settings)
    # heavy, optional (extra "pipeline")
    from pyiceberg.catalog.sql import SqlCatalog  # noqa: PLC0415

    props: dict[str, Any] = {
        "uri": settings.sqlalchemy_uri(),
        "warehouse": settings.warehouse,
        "init_catalog_tables": "false",
        # Check a pooled connection before use: after a database restart the pool's old
        # connections are replaced instead of failing the next catalog call.
        "pool_pre_ping": "true",
    }
    if settings.on_object_store:
        props.update(pyiceberg_s3_properties(settings.s3))
    return SqlCatalog(CATALOG_NAME, **props)


def _open_rest_catalog(settings: LakeSettings) -> Catalog:
    """A pyiceberg ``RestCatalog`` on ``settings.catalog_uri``, signed in with the configured
    credential or token; it asks for vended storage credentials (pyiceberg's default), which
    each loaded table's FileIO then uses.

    Opening fetches the catalog's config (and, with a credential, a token), so a refused
    credential or an unreachable server is a :class:`CatalogUnavailableError` here, naming the key
    to check and never a secret.
    """
    props = {"uri": settings.catalog_uri}
    if settings.on_object_store:
        # The lake's own S3 settings; credentials the catalog vends with a table win over them.
        props.update(pyiceberg_s3_properties(settings.s3))
    for key, value in (
        ("warehouse", settings.catalog_warehouse),
        ("credential", settings.catalog_credential),
        ("token", settings.catalog_token),
    ):
        if value:
            props[key] = value
    uri = settings.catalog_uri
    if settings.catalog_credential:
        # pyiceberg's own default, said explicitly (it warns about the implicit one).
        props["oauth2-server-uri"] = f"{uri.rstrip('/')}/v1/oauth/tokens"
    rest_catalog = _recording_rest_catalog()
    try:
        return rest_catalog(CATALOG_NAME, **props)
    except Exception as exc:  # whatever the catalog answered: one line, what to check
        failure = _rest_failure(exc, props)
        if failure is not None:
            raise failure from None
        # A 500, 501, 4xx or an answer that is no catalog's: nothing the credential explains.
        reason = _reason(exc, props)
        raise CatalogUnavailableError(
            f"cannot open the REST catalog at {uri} ({reason}); check lake.catalog_uri and "
            "lake.catalog_warehouse"
        ) from None


def _unreachable(uri: str) -> CatalogUnavailableError:
    return CatalogUnavailableError(
        f"cannot reach the REST catalog at {uri}: is it running? check lake.catalog_uri "
        "(LAKESYNC_CATALOG_URI)"
    )


def catalog_failure(exc: BaseException, catalog: Catalog) -> CatalogUnavailableError | None:
    """``exc`` as the :class:`CatalogUnavailableError` of ``catalog``: an open REST catalog
    that stopped answering, refused the credential, answered with an error (a 5xx, a 4xx
    other than "no such table" or a conflict) or with something no catalog sends, or a JDBC
    catalog whose database cannot be reached (see :func:`sql_catalog_failure`); None for any
    other failure."""
    props = catalog.properties
    uri = str(props.get("uri", ""))
    if not uri.startswith(("http://", "https://")):
        return sql_catalog_failure(exc, uri)
    return _rest_failure(exc, props)


def sql_catalog_failure(exc: BaseException, uri: str) -> CatalogUnavailableError | None:
    """``exc``, raised by SQLAlchemy under pyiceberg's SQL catalog on the database at ``uri``,
    as the :class:`CatalogUnavailableError` naming that database (never its password; ``uri``
    may be empty when unknown) when it cannot serve now: unreachable, restarting, a connection
    that broke, a pool exhausted, a timeout. None for any other failure (a bad statement is a
    bug, not an outage)."""
    sa = sys.modules.get("sqlalchemy.exc")  # loaded by pyiceberg's SQL catalog, if at all
    if sa is None or not isinstance(exc, sa.SQLAlchemyError) or uri.startswith("sqlite"):
        return None  # a busy embedded catalog file is no outage of a server
    orig = getattr(exc, "orig", None)
    down = (
        isinstance(exc, sa.OperationalError | sa.InterfaceError | sa.TimeoutError)
        or (isinstance(exc, sa.DBAPIError) and exc.connection_invalidated)
        or is_outage_sqlstate(getattr(orig, "sqlstate", None))
    )
    if not down:
        return None
    reason = first_line(orig if orig is not None else exc)
    at = f" at {_without_password(uri)}" if uri else ""
    return CatalogUnavailableError(
        f"cannot reach the lake's catalog database{at} ({reason}): is it running? check "
        "lake.catalog_uri (LAKESYNC_CATALOG_URI)"
    )


def _without_password(uri: str) -> str:
    """``uri`` with its user and password left out (an error names the host and database)."""
    scheme, sep, rest = uri.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else uri


def _rest_failure(exc: BaseException, props: dict[str, Any]) -> CatalogUnavailableError | None:
    """``exc``, raised by pyiceberg's REST client talking to the catalog of ``props``, as the
    :class:`CatalogUnavailableError` saying what failed and what to check, or None when it is
    none of the catalog's failures (a missing table, a commit conflict: the callers' to handle).
    The catalog's own words are kept to one line, with every secret masked, the tokens it
    issued included (an error body may echo the request)."""
    requests = sys.modules.get("requests")  # loaded by pyiceberg's REST catalog, if at all
    rest = sys.modules.get("pyiceberg.exceptions")
    if requests is None or rest is None:
        return None
    uri = props.get("uri", "")
    reason = _reason(exc, props)
    if isinstance(exc, requests.ConnectionError):
        return _unreachable(uri)
    if isinstance(exc, requests.RequestException):  # a timeout, an answer cut short
        return CatalogUnavailableError(
            f"the REST catalog at {uri} did not answer ({reason}): is it running? check "
            "lake.catalog_uri (LAKESYNC_CATALOG_URI)"
        )
    auth = (rest.OAuthError, rest.UnauthorizedError, rest.AuthorizationExpiredError,
            rest.ForbiddenError)
    if isinstance(exc, auth):
        return CatalogUnavailableError(
            f"the REST catalog at {uri} refused the lake's credentials ({reason}); check "
            f"{_signed_in_with(props)}"
        )
    if isinstance(exc, rest.RESTError) or _answered(exc, requests):
        return CatalogUnavailableError(
            f"the REST catalog at {uri} answered with an error ({reason}); check the catalog "
            "server and its log"
        )
    if isinstance(exc, ValueError) and _raised_reading_an_answer(exc):
        return CatalogUnavailableError(
            f"the REST catalog at {uri} sent an answer that is no Iceberg REST catalog's "
            f"({reason}); check lake.catalog_uri (LAKESYNC_CATALOG_URI)"
        )
    return None


def _answered(exc: BaseException, requests: Any) -> bool:
    """Whether ``exc`` is pyiceberg's rendering of an HTTP error status (a 501 is a builtin
    ``NotImplementedError``) other than the ones callers handle: a missing table or namespace,
    a conflict."""
    if not isinstance(exc.__cause__, requests.HTTPError):
        return False
    response = exc.__cause__.response
    return response is None or response.status_code not in (404, 409)


def _raised_reading_an_answer(exc: BaseException) -> bool:
    """Whether ``exc`` came out of pyiceberg's REST client itself (a body it could not parse
    as the answer it expected: malformed JSON, a missing field), not out of the caller's data."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("pyiceberg.catalog.rest"):
            return True
        tb = tb.tb_next
    return False


def _signed_in_with(props: dict[str, Any]) -> str:
    return (
        "lake.catalog_credential (LAKESYNC_CATALOG_CREDENTIAL)" if props.get("credential")
        else "lake.catalog_token (LAKESYNC_CATALOG_TOKEN)" if props.get("token")
        else "no credential: set lake.catalog_credential or lake.catalog_token"
    )


_issued: set[str] = set()
_issued_lock = threading.Lock()


def issued_tokens() -> frozenset[str]:
    """The bearer tokens this process sent to REST catalogs (those the catalogs issued for the
    lake's OAuth2 credential included), for redaction: the lake's settings hold only the
    credential, and a catalog's error body may echo the token."""
    with _issued_lock:
        return frozenset(_issued)


def _known_secrets(props: dict[str, Any]) -> list[str]:
    """The secrets a catalog's answer might echo: the lake's (in the catalog's properties) and
    the tokens catalogs issued."""
    credential = str(props.get("credential") or "")
    found = [credential, credential.partition(":")[2]]
    found += [str(props.get(key) or "") for key in
              ("token", "s3.secret-access-key", "s3.session-token")]
    return [*filter(None, found), *issued_tokens()]


@functools.cache
def _recording_rest_catalog() -> Callable[..., Catalog]:
    """pyiceberg's ``RestCatalog`` whose sessions remember every bearer token they send
    (:func:`issued_tokens`); built on first use, pyiceberg being optional."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.catalog.rest import RestCatalog  # noqa: PLC0415
    from pyiceberg.catalog.rest.auth import AuthManagerAdapter  # noqa: PLC0415

    class RecordingAuth(AuthManagerAdapter):
        def __call__(self, request: Any) -> Any:
            request = super().__call__(request)
            scheme, _, token = str(request.headers.get("Authorization", "")).partition(" ")
            if scheme.lower() == "bearer" and token:
                with _issued_lock:
                    _issued.add(token)
            return request

    class RecordingRestCatalog(RestCatalog):
        def _create_session(self) -> Any:
            session = super()._create_session()
            if isinstance(session.auth, AuthManagerAdapter):
                session.auth = RecordingAuth(session.auth.auth_manager)
            return session

    return RecordingRestCatalog


def _reason(exc: BaseException, props: dict[str, Any]) -> str:
    """The first line of ``exc`` (its type named) with the secrets a catalog's answer might
    echo masked, and any credential shape (a server may echo what it got)."""
    text = Redactor(_known_secrets(props))(f"{type(exc).__name__}: {exc}")
    return text.splitlines()[0] if text else text


def lake_catalog(settings: LakeSettings) -> Callable[[], Catalog]:
    """The opener of ``settings``' catalog that
    :func:`lakesync.destinations.factory.open_destination` calls for a ``lake`` destination (and
    only then): it refuses a data dir with no lake, then opens the catalog."""

    def open_required() -> Catalog:
        require_lake(settings)
        return open_catalog(settings)

    return open_required


def require_lake(settings: LakeSettings) -> None:
    """Raise :class:`NotFoundError` saying how to make a lake when the embedded catalog is absent.

    Readers call this before :func:`open_catalog`: SQLite would otherwise create an empty file
    and fail later with an error about missing catalog tables. (A PostgreSQL or REST catalog is
    a server: opening it answers for itself.)
    """
    if not settings.is_sqlite:
        return
    path = settings.sqlite_path
    found = False
    if path.is_file():
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            found = con.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'iceberg_tables'"
            ).fetchone() is not None
        finally:
            con.close()
    if not found:
        root = settings.data_dir
        raise NotFoundError(
            f"no lake in {root}: make one with `lakesync demo --data-dir {root}` or by running "
            f"the gateway there (`lakesync up --data-dir {root}`), or pass --data-dir (or set "
            "LAKESYNC_DATA_DIR) to the data dir of an existing lake"
        )


_TABLES = (
    "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables"
    " WHERE catalog_name = ?"
)
# The newer layout also stores views: pyiceberg loads only tables (type TABLE or null).
_TABLES_ONLY = (
    "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables"
    " WHERE catalog_name = ? AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
)


def table_locations(settings: LakeSettings) -> dict[str, str] | None:
    """Every table of an embedded (SQLite) catalog as ``{"namespace.table": metadata
    location}``, read straight from the catalog tables, as pyiceberg's ``load_table`` reads them
    (with no pyiceberg, SQLAlchemy or metadata parsing: what a quick ``lakesync query`` needs).

    None when the catalog is not an embedded SQLite file, holds no lake, or has a row pyiceberg
    would refuse (no metadata location): the caller then takes :func:`open_catalog`'s way.
    Tables of nested namespaces are left out, as ``list_namespaces`` lists only the top level.
    """
    if not settings.is_sqlite or not settings.sqlite_path.is_file():
        return None
    con = sqlite3.connect(f"{settings.sqlite_path.as_uri()}?mode=ro", uri=True)
    try:
        columns = {row[1] for row in con.execute("PRAGMA table_info(iceberg_tables)")}
        if not columns:
            return None
        query = _TABLES_ONLY if "iceberg_type" in columns else _TABLES
        rows = con.execute(query, (CATALOG_NAME,)).fetchall()
    finally:
        con.close()
    if any(not location for _, _, location in rows):
        return None
    return {f"{ns}.{name}": location for ns, name, location in rows if "." not in ns}


def landing_schema() -> Any:
    """Iceberg schema of ``lakesync.landing``: one row per accepted delta.

    ``hlc`` is the client HLC, a uint64: stored as ``decimal(20,0)`` because values ≥ 2^63 do not
    fit a signed long. ``ingest_hlc`` is the gateway's own ingest clock (wall time now, so < 2^63)
    and is a long; it is the landing position and what dbt increments filter on. ``columns_json`` is
    the delta's ``[{column, value}]`` list as JSON; ``cells`` holds the same cells with each value
    JSON-encoded on its own, so strings, numbers, booleans, null and nested JSON stay
    distinguishable in SQL.
    """
    # heavy, optional (extra "pipeline")
    from pyiceberg.schema import Schema  # noqa: PLC0415
    from pyiceberg.types import (  # noqa: PLC0415
        DecimalType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    cell = StructType(
        NestedField(13, "column", StringType(), required=True),
        NestedField(14, "value_json", StringType(), required=True),
    )
    return Schema(
        NestedField(1, "gateway_id", StringType(), required=True),
        NestedField(2, "ingest_hlc", LongType(), required=True),
        NestedField(3, "delta_id", StringType(), required=True),
        NestedField(4, "op", StringType(), required=True),
        NestedField(5, "table_name", StringType(), required=True),
        NestedField(6, "row_id", StringType(), required=True),
        NestedField(7, "client_id", StringType(), required=True),
        NestedField(8, "hlc", DecimalType(20, 0), required=True),
        NestedField(9, "columns_json", StringType(), required=True),
        NestedField(10, "cells", ListType(12, cell, element_required=True), required=True),
        NestedField(11, "ingested_at", TimestamptzType(), required=True),
    )


def ensure_landing_table(catalog: Catalog) -> Table:
    """Create the ``lakesync`` namespace and the landing table if missing; return the table.

    Partitioned by gateway (per-tenant queries read only their files); files are written in ingest
    order, so per-file min/max stats on ``ingest_hlc`` prune incremental reads. (A day transform
    would need the optional ``pyiceberg-core`` wheel for appends.)
    """
    # heavy, optional (extra "pipeline")
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError  # noqa: PLC0415
    from pyiceberg.partitioning import PartitionField, PartitionSpec  # noqa: PLC0415
    from pyiceberg.transforms import IdentityTransform  # noqa: PLC0415

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(LANDING_NAMESPACE)
    if catalog.table_exists(LANDING_IDENTIFIER):
        return catalog.load_table(LANDING_IDENTIFIER)
    spec = PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="gateway_id")
    )
    try:
        return catalog.create_table(
            LANDING_IDENTIFIER,
            schema=landing_schema(),
            partition_spec=spec,
            properties={"format-version": "2", "write.parquet.compression-codec": "zstd"},
        )
    except TableAlreadyExistsError:
        return catalog.load_table(LANDING_IDENTIFIER)


def landing_state(table: Table) -> tuple[int | None, dict[str, int]]:
    """The hot-log position the table is complete through and the held-back gateways (each with
    the position it alone is complete through), per the newest snapshot recording a position.

    Walks back from the current snapshot because maintenance commits (compaction, expiry) do not
    carry the properties; ``(None, {})`` when nothing was ever flushed.
    """
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        props = summary.additional_properties if summary is not None else {}
        if POSITION_PROPERTY in props:
            held = json.loads(props.get(HELD_PROPERTY, "{}"))
            return int(props[POSITION_PROPERTY]), {gw: int(p) for gw, p in held.items()}
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return None, {}


def flushed_position(table: Table) -> int | None:
    """The hot-log position the table is complete through (None when nothing was flushed)."""
    return landing_state(table)[0]


def late_landing_sequence(table: Table) -> int:
    """The greatest sequence number of a landing commit that landed rows late (-1: none), from the
    snapshots the table still holds and from :data:`LATE_SEQUENCE_PROPERTY` (snapshots expire)."""
    late = [
        int(snap.sequence_number or 0)
        for snap in table.snapshots()
        if snap.summary is not None and LANDED_LATE_PROPERTY in snap.summary.additional_properties
    ]
    return max([*late, int(table.properties.get(LATE_SEQUENCE_PROPERTY, "-1"))])


def remember_late_landings(catalog: Catalog, attempts: int = 5) -> None:
    """Record the landing table's newest late commit in :data:`LATE_SEQUENCE_PROPERTY` before
    maintenance may expire its snapshot, so a pipeline that has not run since still rebuilds.
    A concurrent flush is retried against the table as it then is."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415

    for attempt in range(attempts):
        table = catalog.load_table(LANDING_IDENTIFIER)
        newest = late_landing_sequence(table)
        if newest <= int(table.properties.get(LATE_SEQUENCE_PROPERTY, "-1")):
            return
        try:
            with table.transaction() as tx:
                tx.set_properties({LATE_SEQUENCE_PROPERTY: str(newest)})
            return
        except CommitFailedException:
            if attempt == attempts - 1:
                raise
