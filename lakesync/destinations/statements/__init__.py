"""Every statement a destination runs, built as a sqlglot AST per dialect (pure, no I/O).

One facade over private modules split along the statements' seams: the parts (dialects, table
layouts, quoting and binding: ``_build``), tables and their evolution (DDL and widening:
``_ddl``), applying a change set through a staging table (``_apply``), reading rows back
(``_reads``), the bookkeeping tables (watermarks, tiering marks: ``_bookkeeping``) and the values
each destination can store (``_storable``). The lake's change-set query is the lakehouse's
(:mod:`lakesync.lakehouse.change_set_sql`).

Never by transpiling text: a staged upsert is on PostgreSQL ``WITH … UPDATE … FROM`` the staged
rows there plus ``INSERT … SELECT … WHERE NOT EXISTS`` the others (the watermark:
``INSERT … ON CONFLICT DO UPDATE``), MySQL ``INSERT … ON DUPLICATE KEY UPDATE`` and BigQuery
``MERGE``, each built for its dialect.
Identifiers are validated (docs/protocol.md §3 rule) before they reach a statement and always
quoted, so a hostile name is refused and a keyword (``order``) is just a name; values are always
bound parameters (``%(name)s`` for psycopg and PyMySQL, ``@name`` for BigQuery), never spliced.

Table layout (docs/protocol.md §11): ``row_id`` primary key, one typed column per schema column,
``props`` JSON default ``{}`` that sync never writes, ``synced_at``, and ``deleted_at`` with soft
delete; the schema's external id column is unique (not on BigQuery, which has no enforced keys).

Change sets are applied set-based from a *staging* table holding the change set's rows
(``row_id``, the typed columns, ``_deleted``): one upsert of the live rows, one soft or hard
delete of the deleted ones, in the caller's transaction together with the watermark upsert
(table ``lakesync_watermarks``).

Values PostgreSQL cannot hold: its ``text`` refuses the character U+0000 and its ``jsonb`` the
``\\u0000`` escape, while MySQL/MariaDB, BigQuery and the lake keep both. For a PostgreSQL
destination U+0000 becomes U+FFFD (the replacement character) in ``string`` columns and in every
string (keys and values) of ``json`` columns; nothing else changes, and other destinations get
the value as it is. One mapping, applied where the rows are produced: by
:func:`storable_value` for the driver's change sets and inside the Spark SQL of
:func:`lakesync.lakehouse.change_set_sql.select_change_set` for the bulk load (both use
:data:`JSON_NUL_ESCAPE`). Without it one such row would fail its table's shipment on every run.
"""

from __future__ import annotations

from lakesync.column_types import Dialect
from lakesync.destinations.statements._apply import (
    apply_deletes,
    clear_staging,
    create_staging,
    delete_rows,
    drop_staging,
    insert_staging,
    staged_summary,
    staging_name,
    truncate_staging,
    upsert_from_staging,
)
from lakesync.destinations.statements._bookkeeping import (
    create_tiering,
    create_watermarks,
    read_tiering,
    read_watermark,
    write_tiering,
    write_watermark,
)
from lakesync.destinations.statements._build import (
    DELETED,
    DIALECTS,
    POSITION,
    TIERING,
    WATERMARKS,
    Columns,
    TableLayout,
    column_spec,
)
from lakesync.destinations.statements._ddl import (
    WIDEN_SUFFIX,
    add_columns,
    create_dataset,
    create_table,
    select_column,
    update_value,
    widen_columns,
)
from lakesync.destinations.statements._reads import (
    select_changes,
    select_rows,
)
from lakesync.destinations.statements._storable import (
    JSON_NUL_ESCAPE,
    MYSQL_TIMESTAMP_FORMAT,
    NUL_REPLACEMENT,
    mysql_keeps_text,
    storable_value,
)
from lakesync.sql_ast import col, ident, param

__all__ = [
    "DELETED",
    "DIALECTS",
    "JSON_NUL_ESCAPE",
    "MYSQL_TIMESTAMP_FORMAT",
    "NUL_REPLACEMENT",
    "POSITION",
    "TIERING",
    "WATERMARKS",
    "WIDEN_SUFFIX",
    "Columns",
    "Dialect",
    "TableLayout",
    "add_columns",
    "apply_deletes",
    "clear_staging",
    "col",
    "column_spec",
    "create_dataset",
    "create_staging",
    "create_table",
    "create_tiering",
    "create_watermarks",
    "delete_rows",
    "drop_staging",
    "ident",
    "insert_staging",
    "mysql_keeps_text",
    "param",
    "read_tiering",
    "read_watermark",
    "select_changes",
    "select_column",
    "select_rows",
    "staged_summary",
    "staging_name",
    "storable_value",
    "truncate_staging",
    "update_value",
    "upsert_from_staging",
    "widen_columns",
    "write_tiering",
    "write_watermark",
]
