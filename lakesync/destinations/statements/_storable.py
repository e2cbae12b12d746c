"""Values a destination can store: what U+0000 becomes in PostgreSQL, how MySQL/MariaDB keeps a
timestamp and a decimal of a large scale (see :mod:`lakesync.destinations.statements`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from lakesync.column_types import Dialect, sql_type
from lakesync.destinations.statements._build import (
    column_spec,
)
from lakesync.schema import ColumnSpec

NUL_REPLACEMENT = "\ufffd"
"""What U+0000 becomes in a PostgreSQL destination (see the module docstring)."""
JSON_NUL_ESCAPE = r"(?<!\\)((?:\\\\)*)\\u0000"
"""A ``\\u0000`` escape in JSON text, as a regular expression Python's ``re`` and Java's
``java.util.regex`` (Spark's ``regexp_replace``) read alike: the backslash that starts it is
preceded by an even number of backslashes (group 1, kept), so the text ``\\\\u0000`` (an
escaped backslash, then ``u0000``) is no match. JSON has backslashes only inside strings."""
_JSON_NUL = re.compile(JSON_NUL_ESCAPE)


MYSQL_TIMESTAMP_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"
"""How a change set for MySQL/MariaDB writes a ``timestamp`` (Spark's pattern, in the session's
UTC): a ``DATETIME(6)`` has no zone, so it is given the UTC wall time as text, whatever time zone
the JVM loading the staging table runs in."""


def storable_value(kind: ColumnSpec | str, value: Any, dialect: Dialect) -> Any:
    """``value`` of a column (json as JSON text; ``kind`` its spec, or its type when that takes
    no options) as a ``dialect`` destination can store it: for PostgreSQL, U+0000 in a string,
    or a ``\\u0000`` escape in JSON text, becomes U+FFFD; for MySQL/MariaDB a timestamp is
    its naive UTC time (``DATETIME`` has no zone) and a decimal of a scale its ``DECIMAL``
    cannot hold is its text; other kinds and values are returned as they are."""
    spec = column_spec(("value", kind) if isinstance(kind, str) else kind)
    if value is None:
        return None
    if dialect == "mysql":
        if spec.type == "timestamp" and isinstance(value, datetime):
            return value.astimezone(UTC).replace(tzinfo=None)
        if spec.type == "decimal" and isinstance(value, Decimal) and mysql_keeps_text(spec):
            return format(value, "f")
        return value
    if dialect != "postgres" or not isinstance(value, str):
        return value
    if spec.type == "string":
        return value.replace("\x00", NUL_REPLACEMENT)
    if spec.type == "json":
        return _JSON_NUL.sub(r"\g<1>" + NUL_REPLACEMENT, value)
    return value


def mysql_keeps_text(spec: ColumnSpec) -> bool:
    """MySQL/MariaDB keeps this decimal as text (``sql_type`` maps its scale to VARCHAR)."""
    return not sql_type(spec, "mysql").startswith("DECIMAL")
