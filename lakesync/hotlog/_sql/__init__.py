"""The hot log shared by the SQL stores, one module per group of tables.

:mod:`.core` holds the tables and what a driver supplies; :mod:`.log`, :mod:`.rows`,
:mod:`.rules`, :mod:`.docs`, :mod:`.views` and :mod:`.checkpoints` each implement the methods of
the ports (:mod:`lakesync.hotlog.ports`) that their tables answer, and :class:`SqlHotLog` is all
of them: the SQLite and PostgreSQL stores derive from it.
"""

from __future__ import annotations

from lakesync.hotlog._sql.checkpoints import SqlCheckpointStore
from lakesync.hotlog._sql.core import (
    ADDED_COLUMNS,
    AFTER_COLUMNS_DDL,
    LOG_COLUMNS,
    C,
    add_column,
    schema_ddl,
    table_info,
)
from lakesync.hotlog._sql.docs import SqlDocumentStore
from lakesync.hotlog._sql.log import SqlDeltaLog
from lakesync.hotlog._sql.rows import SqlRowStore
from lakesync.hotlog._sql.rules import SqlRulesStore
from lakesync.hotlog._sql.views import SqlViewHistoryStore
from lakesync.hotlog.base import HotLog

__all__ = [
    "ADDED_COLUMNS",
    "AFTER_COLUMNS_DDL",
    "LOG_COLUMNS",
    "SqlHotLog",
    "add_column",
    "schema_ddl",
    "table_info",
]


class SqlHotLog(
    SqlDeltaLog[C],
    SqlRowStore[C],
    SqlRulesStore[C],
    SqlDocumentStore[C],
    SqlViewHistoryStore[C],
    SqlCheckpointStore[C],
    HotLog,
):
    """:class:`HotLog` over the shared SQL tables; ``C`` is the driver's connection type."""
