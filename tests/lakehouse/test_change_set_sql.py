# ruff: noqa: E501  (the table holds whole statements, one per line)
"""The lake's change-set query (Spark SQL): exact statements, each parsed back by sqlglot, and
the values each destination's loader stores."""

from __future__ import annotations

import pytest
import sqlglot

from lakesync.lakehouse.change_set_sql import select_change_set
from tests.destinations.test_statements import SOFT, TYPED

BUILD = {
    "change_set": lambda: select_change_set("todos", SOFT.columns),
    "change_set_postgres": lambda: select_change_set(
        "todos", [*SOFT.columns, ("n", "number")], destination="postgres"),
    "change_set_mysql": lambda: select_change_set(
        "todos", [*SOFT.columns, ("n", "number")], destination="mysql"),
}

# fmt: off
TABLE = [
    # The change set on Spark: live rows from the current-state table, rows gone from the row
    # clocks, each branch filtered on its landing position, no join.
    ('change_set', 'spark',
     'SELECT `a`.`row_id`, `a`.`title`, `a`.`meta`, FALSE AS `_deleted`, `a`.`_ingest_hlc` AS `_position` FROM `analytics`.`todos` AS `a` WHERE `a`.`gateway_id` = :gateway_id AND `a`.`_ingest_hlc` > :since UNION ALL SELECT `r`.`row_id`, CAST(NULL AS STRING), CAST(NULL AS STRING), TRUE, `r`.`last_ingest_hlc` FROM `lakesync`.`int_rows_merged` AS `r` WHERE `r`.`gateway_id` = :gateway_id AND `r`.`table_name` = :table_name AND `r`.`last_ingest_hlc` > :since AND NOT `r`.`is_live`'),
    # For a PostgreSQL destination the executors map U+0000 to U+FFFD (the character written
    # raw below) in string and json columns; for the others the values are left as they are.
    ('change_set_postgres', 'spark',
     r"SELECT `a`.`row_id`, REPLACE(`a`.`title`, CHR(0), '�') AS `title`, REGEXP_REPLACE(`a`.`meta`, '(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000', '$1�') AS `meta`, `a`.`n`, FALSE AS `_deleted`, `a`.`_ingest_hlc` AS `_position` FROM `analytics`.`todos` AS `a` WHERE `a`.`gateway_id` = :gateway_id AND `a`.`_ingest_hlc` > :since UNION ALL SELECT `r`.`row_id`, CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS DOUBLE), TRUE, `r`.`last_ingest_hlc` FROM `lakesync`.`int_rows_merged` AS `r` WHERE `r`.`gateway_id` = :gateway_id AND `r`.`table_name` = :table_name AND `r`.`last_ingest_hlc` > :since AND NOT `r`.`is_live`"),
    ('change_set_mysql', 'spark',
     'SELECT `a`.`row_id`, `a`.`title`, `a`.`meta`, `a`.`n`, FALSE AS `_deleted`, `a`.`_ingest_hlc` AS `_position` FROM `analytics`.`todos` AS `a` WHERE `a`.`gateway_id` = :gateway_id AND `a`.`_ingest_hlc` > :since UNION ALL SELECT `r`.`row_id`, CAST(NULL AS STRING), CAST(NULL AS STRING), CAST(NULL AS DOUBLE), TRUE, `r`.`last_ingest_hlc` FROM `lakesync`.`int_rows_merged` AS `r` WHERE `r`.`gateway_id` = :gateway_id AND `r`.`table_name` = :table_name AND `r`.`last_ingest_hlc` > :since AND NOT `r`.`is_live`'),
]
# fmt: on


@pytest.mark.parametrize(("operation", "dialect", "expected"), TABLE)
def test_change_set_table(operation: str, dialect: str, expected: str) -> None:
    sql = BUILD[operation]()
    assert sql == expected
    parsed = sqlglot.parse(sql, read=dialect)
    assert len(parsed) == 1 and parsed[0] is not None


def test_a_change_set_holds_what_each_loader_stores() -> None:
    """MySQL gets a timestamp as its UTC wall time text and a decimal its DECIMAL cannot hold as
    text; BigQuery's JSON load gets decimals as text."""
    mysql = select_change_set("ledger", TYPED.columns, destination="mysql")
    assert "DATE_FORMAT(`a`.`at`, 'yyyy-MM-dd HH:mm:ss.SSSSSS') AS `at`" in mysql
    assert "CAST(`a`.`big` AS STRING) AS `big`" in mysql and "`a`.`amount`," in mysql
    bigquery = select_change_set("ledger", TYPED.columns, destination="bigquery")
    assert "CAST(`a`.`amount` AS STRING) AS `amount`" in bigquery and "`a`.`at`," in bigquery
