"""BigQuery as a source: a table (``source_table: dataset.table``) or a query (``query:``) read
by the database sources' strategies (:class:`~lakesync.connectors.database.DatabaseSource`:
``cursor`` with ``lookback``, or ``diff`` with deletes), through the official
``google-cloud-bigquery`` client.

Every read is one query job whose results are paged ``chunk_rows`` rows at a time
(``getQueryResults`` with ``maxResults``), so a poll holds one page of rows, whatever the
table's size. Columns are typed from BigQuery's own schema by :data:`BIGQUERY_TYPES`, the one
table of how a BigQuery type lands in the gateway's column types; values are converted to match
by :func:`bigquery_value`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lakesync.connector_specs import BIGQUERY_URL, BigQuerySpec
from lakesync.connectors._values import json_value
from lakesync.connectors.database import DatabaseSource, Dialect
from lakesync.errors import ConfigError

__all__ = [
    "BIGQUERY_TYPES",
    "EXACT_DIGITS",
    "BigQueryDialect",
    "BigQuerySource",
    "bigquery_client",
    "bigquery_type",
    "bigquery_value",
]

BIGQUERY_TYPES: dict[str, str] = {
    # Numbers a double holds (INT64 beyond ±2^53 rounds, as every number does: docs/protocol.md §1).
    "INTEGER": "number",
    "INT64": "number",
    "FLOAT": "number",
    "FLOAT64": "number",
    # Decimals: a number when the declared precision is exact in a double (EXACT_DIGITS), else
    # their exact text (an unparameterised NUMERIC has 38 digits, BIGNUMERIC 76).
    "NUMERIC": "string",
    "BIGNUMERIC": "string",
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "STRING": "string",
    # Times as ISO 8601 text (TIMESTAMP with its +00:00), bytes as base64 text.
    "DATE": "string",
    "DATETIME": "string",
    "TIME": "string",
    "TIMESTAMP": "string",
    "BYTES": "string",
    "GEOGRAPHY": "string",
    "INTERVAL": "string",
    "JSON": "json",
    "RECORD": "json",
    "STRUCT": "json",
    "RANGE": "json",
}
"""BigQuery type → gateway column type: the one place to widen when the gateway gains types.
A REPEATED field of any type is ``json`` (an array)."""

EXACT_DIGITS = 15
"""A decimal of at most this many significant digits survives a double's round trip."""


def bigquery_type(field_type: str, mode: str = "NULLABLE", precision: int | None = None) -> str:
    """The gateway column type of a BigQuery field (see :data:`BIGQUERY_TYPES`)."""
    if mode == "REPEATED":
        return "json"
    if field_type in ("NUMERIC", "BIGNUMERIC") and precision and precision <= EXACT_DIGITS:
        return "number"
    return BIGQUERY_TYPES.get(field_type, "string")


def bigquery_value(value: Any, typ: str) -> Any:
    """A value the client read, as a ``typ`` gateway column holds it: decimals as numbers or
    exact text (nested ones: a number when the double is exact), bytes as base64, times as ISO
    8601 text, records and arrays as JSON."""
    match value:
        case bytes():
            return base64.b64encode(value).decode("ascii")
        case decimal.Decimal():
            if typ == "number":
                return float(value)
            exact = math.isfinite(value) and decimal.Decimal(float(value)) == value
            return float(value) if exact and typ != "string" else str(value)
        case dict():
            return {str(k): bigquery_value(v, "json") for k, v in value.items()}
        case list() | tuple():
            return [bigquery_value(v, "json") for v in value]
        case _:
            return json_value(value)


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

    def columns(self, conn: Any, spec: BigQuerySpec) -> list[tuple[str, str, str]]:
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
            (f.name, f.field_type, f"{f.mode or 'NULLABLE'}:{f.precision or ''}") for f in schema
        ]

    def column_type(self, data_type: str, column_type_text: str) -> str:
        mode, _, precision = column_type_text.partition(":")
        return bigquery_type(data_type, mode, int(precision) if precision else None)

    def cell(self, value: Any, typ: str) -> Any:
        return bigquery_value(value, typ)

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
