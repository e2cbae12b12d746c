"""Source column types as gateway column types: pure, one table per source system.

A database source reads its columns' types (``information_schema``; BigQuery its table schema)
and maps each to a declared column (docs/protocol.md §10) by the tables here, so a connector's
table needs no hand-written schema. A type with no mapping becomes ``string`` (its text) and
:func:`map_column` says so, naming the column, for the source to log.

Decisions (documented in ``docs/guides/connectors.md``):

- ``numeric``/``decimal`` with a precision of at most 38 digits is ``decimal(p, s)``; one
  without a declared precision (PostgreSQL's bare ``numeric``) is ``decimal(38, 9)``, as dlt
  maps it (a value with more digits does not fit: the table's contract decides, see
  :mod:`lakesync.connectors._contract`); more than 38 digits is ``string`` (the exact text).
- ``timestamp without time zone`` / MySQL ``DATETIME`` / BigQuery ``DATETIME`` hold no zone:
  they are read as UTC. MySQL ``TIMESTAMP`` is read in a UTC session, so it is exact.
- ``time``, ``interval``, ``uuid``, enums and sets are ``string``; arrays and records ``json``.
- An unsigned ``BIGINT`` may exceed 2^63 - 1: it is ``decimal(20, 0)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BIGQUERY_TYPES",
    "DECIMAL_DEFAULT",
    "MAX_PRECISION",
    "MYSQL_TYPES",
    "POSTGRES_TYPES",
    "SourceColumn",
    "declared_column",
    "map_column",
]

MAX_PRECISION = 38
"""The most digits a ``decimal`` column holds."""
DECIMAL_DEFAULT = (38, 9)
"""The ``decimal`` a numeric without a declared precision maps to."""


@dataclass(frozen=True, slots=True)
class SourceColumn:
    """A source column as its system describes it: ``system`` (``postgres``, ``mysql``,
    ``bigquery``), its ``name``, ``data_type`` (as the system spells it), ``detail`` (the
    full declared type: PostgreSQL's ``udt_name``, MySQL's ``column_type``, BigQuery's mode)
    and a decimal's ``precision``/``scale``; ``enum`` when the type is an enumeration."""

    system: str
    name: str
    data_type: str
    detail: str = ""
    precision: int | None = None
    scale: int | None = None
    enum: bool = False


POSTGRES_TYPES: dict[str, str] = {
    "smallint": "integer",
    "integer": "integer",
    "bigint": "integer",
    "oid": "integer",
    "numeric": "decimal",
    "real": "number",
    "double precision": "number",
    "boolean": "boolean",
    "text": "string",
    "character varying": "string",
    "character": "string",
    "name": "string",
    "citext": "string",
    "uuid": "string",
    "date": "date",
    "timestamp with time zone": "timestamp",
    "timestamp without time zone": "timestamp",
    "time with time zone": "string",
    "time without time zone": "string",
    "json": "json",
    "jsonb": "json",
    "bytea": "bytes",
    "ARRAY": "json",
}
"""PostgreSQL ``information_schema.columns.data_type`` → column type (enums are ``string``)."""

MYSQL_TYPES: dict[str, str] = {
    "tinyint": "integer",
    "smallint": "integer",
    "mediumint": "integer",
    "int": "integer",
    "integer": "integer",
    "bigint": "integer",
    "year": "integer",
    "decimal": "decimal",
    "numeric": "decimal",
    "float": "number",
    "double": "number",
    "real": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "char": "string",
    "varchar": "string",
    "tinytext": "string",
    "text": "string",
    "mediumtext": "string",
    "longtext": "string",
    "enum": "string",
    "set": "string",
    "time": "string",
    "date": "date",
    "datetime": "timestamp",
    "timestamp": "timestamp",
    "json": "json",
    "binary": "bytes",
    "varbinary": "bytes",
    "tinyblob": "bytes",
    "blob": "bytes",
    "mediumblob": "bytes",
    "longblob": "bytes",
}
"""MySQL/MariaDB ``information_schema.columns.data_type`` → column type (``tinyint(1)`` is
``boolean``; MariaDB's JSON, a ``longtext`` with a ``json_valid`` check, is ``json``)."""

BIGQUERY_TYPES: dict[str, str] = {
    "INTEGER": "integer",
    "INT64": "integer",
    "FLOAT": "number",
    "FLOAT64": "number",
    "NUMERIC": "decimal",
    "BIGNUMERIC": "decimal",
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "STRING": "string",
    "DATE": "date",
    "DATETIME": "timestamp",
    "TIMESTAMP": "timestamp",
    "TIME": "string",
    "BYTES": "bytes",
    "GEOGRAPHY": "string",
    "INTERVAL": "string",
    "JSON": "json",
    "RECORD": "json",
    "STRUCT": "json",
    "RANGE": "json",
}
"""BigQuery field type → column type (a REPEATED field of any type is ``json``; ``NUMERIC``
without parameters is ``decimal(38, 9)``, BigQuery's own; ``BIGNUMERIC`` beyond 38 digits is
``string``)."""


def declared_column(name: str, typ: str) -> dict[str, Any]:
    """A declared column from a type written ``decimal(18,2)`` or ``timestamp`` (how the
    API connectors' field tables spell them)."""
    found = re.fullmatch(r"decimal\((\d+),(\d+)\)", typ)
    if found is None:
        return {"name": name, "type": typ}
    return {"name": name, "type": "decimal", "precision": int(found[1]), "scale": int(found[2])}


_TABLES = {"postgres": POSTGRES_TYPES, "mysql": MYSQL_TYPES, "bigquery": BIGQUERY_TYPES}
_BIGNUMERIC_DEFAULT = (76, 38)


def map_column(col: SourceColumn) -> tuple[dict[str, Any], str | None]:
    """The declared column (``{name, type[, precision, scale]}``) of a source column, and a
    warning naming the column when its type has no mapping (it is then ``string``)."""
    if col.system == "bigquery" and col.detail == "REPEATED":
        return {"name": col.name, "type": "json"}, None
    if col.system == "mysql" and col.detail.lower().startswith("tinyint(1)"):
        return {"name": col.name, "type": "boolean"}, None
    typ = _TABLES[col.system].get(col.data_type)
    if typ is None and col.enum:
        typ = "string"
    if typ is None:
        return {"name": col.name, "type": "string"}, (
            f"column {col.name!r}: source type {col.detail or col.data_type!r} has no mapping;"
            " it is brought as string (its text)"
        )
    if (
        col.system == "mysql"
        and col.detail.lower().startswith("bigint")
        and ("unsigned" in col.detail.lower())
    ):
        return {"name": col.name, "type": "decimal", "precision": 20, "scale": 0}, None
    if typ != "decimal":
        return {"name": col.name, "type": typ}, None
    return _decimal(col)


def _decimal(col: SourceColumn) -> tuple[dict[str, Any], str | None]:
    precision, scale = col.precision, col.scale
    if precision is None:
        precision, scale = _BIGNUMERIC_DEFAULT if col.data_type == "BIGNUMERIC" else DECIMAL_DEFAULT
    scale = scale or 0
    if precision > MAX_PRECISION:
        return {"name": col.name, "type": "string"}, (
            f"column {col.name!r}: {col.data_type}({precision},{scale}) holds more than "
            f"{MAX_PRECISION} digits; it is brought as string (its exact text)"
        )
    return {"name": col.name, "type": "decimal", "precision": precision, "scale": scale}, None
