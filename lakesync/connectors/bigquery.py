"""BigQuery as a source: a table (``source_table: dataset.table``) or a query (``query:``) read
by the database sources' strategies (:class:`~lakesync.connectors.database.DatabaseSource`:
``cursor`` with ``lookback``, or ``diff`` with deletes), through the official
``google-cloud-bigquery`` client.

Every read is one query job whose results are paged ``chunk_rows`` rows at a time
(``getQueryResults`` with ``maxResults``), so a poll holds one page of rows, whatever the
table's size. Columns are typed from BigQuery's own schema by :data:`BIGQUERY_TYPES`, the one
table of how a BigQuery type lands in the gateway's column types (in
:mod:`lakesync.connectors._types`, next to the databases'); values are converted to match
by :func:`bigquery_value` (the client's Python values: ``int``, ``Decimal``, ``datetime``,
``date``, ``bytes``, dicts and lists, each encoded for its column by the poller).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lakesync.connector_specs import BIGQUERY_URL, BigQuerySpec
from lakesync.connectors._types import BIGQUERY_TYPES, SourceColumn, map_column
from lakesync.connectors._values import fit_value
from lakesync.connectors.database import DatabaseSource, Dialect
from lakesync.errors import ConfigError

__all__ = [
    "BIGQUERY_TYPES",
    "BigQueryDialect",
    "BigQuerySource",
    "bigquery_client",
    "bigquery_type",
    "bigquery_value",
]

def bigquery_type(
    field_type: str,
    mode: str = "NULLABLE",
    precision: int | None = None,
    scale: int | None = None,
) -> str:
    """The gateway column type of a BigQuery field (:data:`BIGQUERY_TYPES`)."""
    column, _ = map_column(SourceColumn("bigquery", "f", field_type, mode, precision, scale))
    return str(column["type"])


def bigquery_value(value: Any, typ: str) -> Any:
    """A value the client read as the Python value of a ``typ`` column (the poller encodes it:
    :func:`lakesync.connectors._values.fit_value`)."""
    return fit_value(typ, value)


def _quote(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def bigquery_client(url: str, credentials: str = "") -> Any:
    """A client for ``bigquery://PROJECT[?endpoint=…]``: the service account key ``credentials``
    (its JSON text) when given, anonymous with an ``endpoint`` (an emulator), else Google's
    default chain."""
    # heavy, optional (extras "connectors", "destinations")
    from google.api_core.client_options import ClientOptions  # noqa: PLC0415
    from google.cloud import bigquery  # noqa: PLC0415

    if not BIGQUERY_URL.fullmatch(url):
        raise ConfigError("a bigquery url is bigquery://PROJECT[?endpoint=…]")
    parts = urlsplit(url)
    project = parts.hostname or ""
    endpoint = parse_qs(parts.query).get("endpoint", [""])[0]
    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    creds: Any = None
    if credentials:
        # heavy, optional (extras "connectors", "destinations")
        from google.oauth2 import service_account  # noqa: PLC0415

        try:
            info = json.loads(credentials)
        except ValueError:
            raise ConfigError("bigquery credentials must be a service account's JSON key") from None
        creds = service_account.Credentials.from_service_account_info(info)  # type: ignore[no-untyped-call]
    elif endpoint:
        # heavy, optional (extras "connectors", "destinations")
        from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415

        creds = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return bigquery.Client(project=project, credentials=creds, client_options=options)


_PARAM_TYPES = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL"}


def _param(since: Any, field_type: str) -> tuple[str, Any]:
    """A cursor value (from :func:`lakesync.connectors.database._cursor_in`) as a query
    parameter of the cursor column's type."""
    typ = _PARAM_TYPES.get(field_type, field_type)
    if typ == "DATE" and isinstance(since, dt.datetime):
        return typ, since.date()
    if typ == "INT64":
        return typ, math.floor(since)
    return typ, since


class BigQueryDialect(Dialect[BigQuerySpec]):
    """BigQuery for :class:`~lakesync.connectors.database.DatabaseSource`: one paged query job
    per read."""

    def __init__(self) -> None:
        self._types: dict[str, str] = {}

    def open(self, spec: BigQuerySpec) -> Any:
        return bigquery_client(spec.url, spec.credentials)

    def _source(self, spec: BigQuerySpec) -> str:
        if spec.query:
            return f"({spec.query}) AS src"
        return ".".join(_quote(p) for p in spec.source_table.split("."))

    def columns(self, conn: Any, spec: BigQuerySpec) -> list[SourceColumn]:
        if spec.query:
            schema = conn.query(f"SELECT * FROM {self._source(spec)} LIMIT 0").result().schema
        else:
            # heavy, optional (extras "connectors", "destinations")
            from google.api_core.exceptions import NotFound  # noqa: PLC0415

            try:
                schema = conn.get_table(spec.source_table).schema
            except NotFound:
                return []
        self._types = {f.name: f.field_type for f in schema}
        return [
            SourceColumn(
                "bigquery",
                f.name,
                f.field_type,
                f.mode or "NULLABLE",
                None if f.precision is None else int(f.precision),
                None if f.scale is None else int(f.scale),
            )
            for f in schema
        ]

    def stream(
        self, conn: Any, spec: BigQuerySpec, columns: Sequence[str], since: Any
    ) -> AbstractContextManager[Iterator[dict[str, Any]]]:
        # heavy, optional (extras "connectors", "destinations")
        from google.cloud import bigquery  # noqa: PLC0415

        query = f"SELECT {', '.join(_quote(c) for c in columns)} FROM {self._source(spec)}"
        params = []
        if since is None:
            order = [_quote(k) for k in spec.key]
        else:
            typ, value = _param(since, self._types.get(spec.cursor_column, "STRING"))
            params.append(bigquery.ScalarQueryParameter("since", typ, value))
            query += f" WHERE {_quote(spec.cursor_column)} >= @since"
            order = [_quote(spec.cursor_column), *(_quote(k) for k in spec.key)]
        query += f" ORDER BY {', '.join(order)}"
        config = bigquery.QueryJobConfig(query_parameters=params)
        return _rows(conn, query, config, spec.chunk_rows)


@contextmanager
def _rows(conn: Any, query: str, config: Any, page_size: int) -> Iterator[Iterator[dict[str, Any]]]:
    """The query's rows as dicts, fetched a page of ``page_size`` at a time."""
    result = conn.query(query, job_config=config).result(page_size=page_size)
    yield (dict(row.items()) for row in result)


class BigQuerySource(DatabaseSource[BigQuerySpec]):
    """A BigQuery table or query (see the module docstring)."""

    def __init__(self, spec: BigQuerySpec) -> None:
        super().__init__(spec, BigQueryDialect())
