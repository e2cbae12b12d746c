# ruff: noqa: E501  (the dialect table holds whole statements, one per line)
"""The statement builder: a dialect table of generated statements (each parsed back by sqlglot),
and hostile identifiers, which never reach a statement."""

from __future__ import annotations

import json
import re

import pytest
import sqlglot
from hypothesis import given
from hypothesis import strategies as hs

from lakesync.destinations import statements as st
from lakesync.destinations.statements import TableLayout
from lakesync.errors import SchemaError
from lakesync.schema import STAGING_PREFIX, ColumnSpec

SOFT = TableLayout("todos", [("title", "string"), ("meta", "json")], "soft")
HARD = TableLayout("todos", [("title", "string"), ("meta", "json")], "hard")

BUILD = {
    "create_table": lambda d: st.create_table(SOFT, d),
    "add_column": lambda d: st.add_columns(SOFT, ["row_id", "title"], d)[0],
    "upsert": lambda d: st.upsert_from_staging(SOFT, d),
    "soft_delete": lambda d: st.apply_deletes(SOFT, d),
    "hard_delete": lambda d: st.apply_deletes(HARD, d),
    "watermark": st.write_watermark,
    "tiering": st.write_tiering,
    "evict": lambda d: st.delete_rows(SOFT, d, 2),
    "changes_page": lambda d: st.select_changes(SOFT, d, limited=True),
    "create_staging": lambda d: st.create_staging(SOFT, d),
    "truncate_staging": lambda d: st.truncate_staging(SOFT, d),
}

# fmt: off
TABLE = [
    ('create_table', 'postgres',
     'CREATE TABLE IF NOT EXISTS "todos" ("row_id" TEXT NOT NULL, "title" TEXT, "meta" JSONB, "props" JSONB NOT NULL DEFAULT \'{}\', "synced_at" TIMESTAMPTZ NOT NULL, "deleted_at" TIMESTAMPTZ, PRIMARY KEY ("row_id"))'),
    ('add_column', 'postgres',
     'ALTER TABLE "todos" ADD COLUMN "meta" JSONB'),
    ('upsert', 'postgres',
     'WITH "updated" AS (UPDATE "todos" AS "t" SET "title" = "s"."title", "meta" = CAST("s"."meta" AS JSONB), "synced_at" = %(now)s, "deleted_at" = NULL FROM "lakesync_stage_todos" AS "s" WHERE "t"."row_id" = "s"."row_id" AND NOT "s"."_deleted") INSERT INTO "todos" ("row_id", "title", "meta", "synced_at", "deleted_at") SELECT "s"."row_id", "s"."title", CAST("s"."meta" AS JSONB), %(now)s, NULL FROM "lakesync_stage_todos" AS "s" WHERE NOT "s"."_deleted" AND NOT EXISTS(SELECT 1 FROM "todos" AS "t" WHERE "t"."row_id" = "s"."row_id")'),
    ('soft_delete', 'postgres',
     'UPDATE "todos" SET "deleted_at" = %(now)s, "synced_at" = %(now)s WHERE "row_id" IN (SELECT "s"."row_id" FROM "lakesync_stage_todos" AS "s" WHERE "s"."_deleted") AND "deleted_at" IS NULL'),
    ('hard_delete', 'postgres',
     'DELETE FROM "todos" WHERE "row_id" IN (SELECT "s"."row_id" FROM "lakesync_stage_todos" AS "s" WHERE "s"."_deleted")'),
    ('watermark', 'postgres',
     'INSERT INTO "lakesync_watermarks" ("gateway_id", "table_name", "position", "updated_at") VALUES (%(gateway_id)s, %(table_name)s, %(position)s, %(now)s) ON CONFLICT("gateway_id", "table_name") DO UPDATE SET "position" = "excluded"."position", "updated_at" = "excluded"."updated_at"'),
    ('tiering', 'postgres',
     'INSERT INTO "lakesync_tiering" ("gateway_id", "table_name", "cutoff", "position", "updated_at") VALUES (%(gateway_id)s, %(table_name)s, %(cutoff)s, %(position)s, %(now)s) ON CONFLICT("gateway_id", "table_name") DO UPDATE SET "cutoff" = "excluded"."cutoff", "position" = "excluded"."position", "updated_at" = "excluded"."updated_at"'),
    ('create_table', 'mysql',
     "CREATE TABLE IF NOT EXISTS `todos` (`row_id` VARCHAR(768) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, `title` LONGTEXT, `meta` JSON, `props` JSON NOT NULL DEFAULT ('{}'), `synced_at` DATETIME(6) NOT NULL, `deleted_at` DATETIME(6), PRIMARY KEY (`row_id`))"),
    ('add_column', 'mysql',
     'ALTER TABLE `todos` ADD COLUMN `meta` JSON'),
    ('upsert', 'mysql',
     'INSERT INTO `todos` (`row_id`, `title`, `meta`, `synced_at`, `deleted_at`) SELECT `s`.`row_id`, `s`.`title`, `s`.`meta`, %(now)s, NULL FROM `lakesync_stage_todos` AS `s` WHERE NOT `s`.`_deleted` ON DUPLICATE KEY UPDATE `title` = VALUES(`title`), `meta` = VALUES(`meta`), `synced_at` = VALUES(`synced_at`), `deleted_at` = VALUES(`deleted_at`)'),
    ('soft_delete', 'mysql',
     'UPDATE `todos` SET `deleted_at` = %(now)s, `synced_at` = %(now)s WHERE `row_id` IN (SELECT `s`.`row_id` FROM `lakesync_stage_todos` AS `s` WHERE `s`.`_deleted`) AND `deleted_at` IS NULL'),
    ('hard_delete', 'mysql',
     'DELETE FROM `todos` WHERE `row_id` IN (SELECT `s`.`row_id` FROM `lakesync_stage_todos` AS `s` WHERE `s`.`_deleted`)'),
    ('watermark', 'mysql',
     'INSERT INTO `lakesync_watermarks` (`gateway_id`, `table_name`, `position`, `updated_at`) VALUES (%(gateway_id)s, %(table_name)s, %(position)s, %(now)s) ON DUPLICATE KEY UPDATE `position` = VALUES(`position`), `updated_at` = VALUES(`updated_at`)'),
    ('tiering', 'mysql',
     'INSERT INTO `lakesync_tiering` (`gateway_id`, `table_name`, `cutoff`, `position`, `updated_at`) VALUES (%(gateway_id)s, %(table_name)s, %(cutoff)s, %(position)s, %(now)s) ON DUPLICATE KEY UPDATE `cutoff` = VALUES(`cutoff`), `position` = VALUES(`position`), `updated_at` = VALUES(`updated_at`)'),
    ('create_table', 'bigquery',
     'CREATE TABLE IF NOT EXISTS `todos` (`row_id` STRING NOT NULL, `title` STRING, `meta` JSON, `props` JSON NOT NULL, `synced_at` TIMESTAMP NOT NULL, `deleted_at` TIMESTAMP, PRIMARY KEY (`row_id`) NOT ENFORCED)'),
    ('add_column', 'bigquery',
     'ALTER TABLE `todos` ADD COLUMN `meta` JSON'),
    ('upsert', 'bigquery',
     "MERGE INTO `todos` AS `t` USING `lakesync_stage_todos` AS `s` ON `t`.`row_id` = `s`.`row_id` WHEN MATCHED AND NOT `s`.`_deleted` THEN UPDATE SET `title` = `s`.`title`, `meta` = PARSE_JSON(`s`.`meta`), `synced_at` = @now, `deleted_at` = CAST(NULL AS TIMESTAMP) WHEN NOT MATCHED AND NOT `s`.`_deleted` THEN INSERT (`row_id`, `title`, `meta`, `synced_at`, `props`) VALUES (`s`.`row_id`, `s`.`title`, PARSE_JSON(`s`.`meta`), @now, JSON '{}')"),
    ('soft_delete', 'bigquery',
     'UPDATE `todos` SET `deleted_at` = @now, `synced_at` = @now WHERE `row_id` IN (SELECT `s`.`row_id` FROM `lakesync_stage_todos` AS `s` WHERE `s`.`_deleted`) AND `deleted_at` IS NULL'),
    ('hard_delete', 'bigquery',
     'DELETE FROM `todos` WHERE `row_id` IN (SELECT `s`.`row_id` FROM `lakesync_stage_todos` AS `s` WHERE `s`.`_deleted`)'),
    ('watermark', 'bigquery',
     'MERGE INTO `lakesync_watermarks` AS `t` USING (SELECT @gateway_id AS `gateway_id`, @table_name AS `table_name`, @position AS `position`, @now AS `updated_at`) AS `s` ON `t`.`gateway_id` = `s`.`gateway_id` AND `t`.`table_name` = `s`.`table_name` WHEN MATCHED THEN UPDATE SET `position` = `s`.`position`, `updated_at` = `s`.`updated_at` WHEN NOT MATCHED THEN INSERT (`gateway_id`, `table_name`, `position`, `updated_at`) VALUES (`s`.`gateway_id`, `s`.`table_name`, `s`.`position`, `s`.`updated_at`)'),
    ('tiering', 'bigquery',
     'MERGE INTO `lakesync_tiering` AS `t` USING (SELECT @gateway_id AS `gateway_id`, @table_name AS `table_name`, @cutoff AS `cutoff`, @position AS `position`, @now AS `updated_at`) AS `s` ON `t`.`gateway_id` = `s`.`gateway_id` AND `t`.`table_name` = `s`.`table_name` WHEN MATCHED THEN UPDATE SET `cutoff` = `s`.`cutoff`, `position` = `s`.`position`, `updated_at` = `s`.`updated_at` WHEN NOT MATCHED THEN INSERT (`gateway_id`, `table_name`, `cutoff`, `position`, `updated_at`) VALUES (`s`.`gateway_id`, `s`.`table_name`, `s`.`cutoff`, `s`.`position`, `s`.`updated_at`)'),
    ('evict', 'postgres', 'DELETE FROM "todos" WHERE "row_id" IN (%(r0)s, %(r1)s)'),
    ('evict', 'mysql', 'DELETE FROM `todos` WHERE `row_id` IN (%(r0)s, %(r1)s)'),
    ('evict', 'bigquery', 'DELETE FROM `todos` WHERE `row_id` IN (@r0, @r1)'),
    ('changes_page', 'postgres',
     'SELECT "row_id", "title", "meta", "props", "synced_at", "deleted_at" FROM "todos" WHERE "synced_at" > %(since)s AND "synced_at" <= (SELECT MAX("f"."synced_at") FROM (SELECT "synced_at" FROM "todos" WHERE "synced_at" > %(since)s ORDER BY "synced_at" LIMIT %(limit)s) AS "f") ORDER BY "synced_at", "row_id"'),
    ('changes_page', 'mysql',
     'SELECT `row_id`, `title`, `meta`, `props`, `synced_at`, `deleted_at` FROM `todos` WHERE `synced_at` > %(since)s AND `synced_at` <= (SELECT MAX(`f`.`synced_at`) FROM (SELECT `synced_at` FROM `todos` WHERE `synced_at` > %(since)s ORDER BY `synced_at` LIMIT %(limit)s) AS `f`) ORDER BY `synced_at`, `row_id`'),
    ('changes_page', 'bigquery',
     'SELECT `row_id`, `title`, `meta`, `props`, `synced_at`, `deleted_at` FROM `todos` WHERE `synced_at` > @since AND `synced_at` <= (SELECT MAX(`f`.`synced_at`) FROM (SELECT `synced_at` FROM `todos` WHERE `synced_at` > @since ORDER BY `synced_at` LIMIT @limit) AS `f`) ORDER BY `synced_at`, `row_id`'),
    # Staging: unlogged and index-free on PostgreSQL; keyed on MySQL (its deletes look ids up).
    ('create_staging', 'postgres',
     'CREATE UNLOGGED TABLE IF NOT EXISTS "lakesync_stage_todos" ("row_id" TEXT NOT NULL, "title" TEXT, "meta" TEXT, "_deleted" BOOLEAN, "_position" DECIMAL(20, 0))'),
    ('create_staging', 'mysql',
     'CREATE TABLE IF NOT EXISTS `lakesync_stage_todos` (`row_id` VARCHAR(768) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, `title` LONGTEXT, `meta` LONGTEXT, `_deleted` TINYINT(1), `_position` DECIMAL(20, 0), PRIMARY KEY (`row_id`))'),
    ('create_staging', 'bigquery',
     'CREATE TABLE IF NOT EXISTS `lakesync_stage_todos` (`row_id` STRING NOT NULL, `title` STRING, `meta` STRING, `_deleted` BOOL, `_position` BIGNUMERIC)'),
    ('truncate_staging', 'postgres', 'TRUNCATE TABLE "lakesync_stage_todos"'),
    ('truncate_staging', 'mysql', 'TRUNCATE TABLE `lakesync_stage_todos`'),
]
# fmt: on


def parse_back(sql: str, dialect: str) -> sqlglot.Expression:
    """Parse a generated statement with sqlglot's own dialect (PyMySQL's %(x)s read as :x)."""
    if dialect == "mysql":
        sql = re.sub(r"%\((\w+)\)s", r":\1", sql)
    parsed = sqlglot.parse(sql, read=dialect)
    assert len(parsed) == 1 and parsed[0] is not None
    return parsed[0]


@pytest.mark.parametrize(("operation", "dialect", "expected"), TABLE)
def test_dialect_table(operation: str, dialect: str, expected: str) -> None:
    sql = BUILD[operation](dialect)
    assert sql == expected
    parse_back(sql, dialect)


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "bigquery"])
def test_upserts_are_built_per_dialect_and_never_write_props(dialect: str) -> None:
    tree = parse_back(st.upsert_from_staging(SOFT, dialect), dialect)
    if dialect == "bigquery":
        assert isinstance(tree, sqlglot.exp.Merge)
        updates = [u for u in tree.find_all(sqlglot.exp.Update)]
        assigned = {eq.this.name for u in updates for eq in u.expressions}
    elif dialect == "postgres":  # an UPDATE of the rows there, an INSERT of the others
        assert isinstance(tree, sqlglot.exp.Insert) and not tree.args.get("conflict")
        [update] = list(tree.find_all(sqlglot.exp.Update))
        assigned = {eq.this.name for eq in update.expressions}
        inserted = {c.name for c in tree.this.expressions}
        assert inserted - {"row_id"} == assigned
    else:
        conflict = tree.args["conflict"]
        assert bool(conflict.args.get("duplicate")) is (dialect == "mysql")
        assigned = {eq.this.name for eq in conflict.expressions}
    assert assigned == {"title", "meta", "synced_at", "deleted_at"}  # props: never by sync


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "bigquery"])
def test_every_statement_parses_back(dialect: str) -> None:
    layout = TableLayout("order", [("select", "string"), ("from", "json")], "soft", "select")
    for sql in [
        st.create_table(layout, dialect), *st.add_columns(layout, [], dialect),
        st.create_staging(layout, dialect), st.insert_staging(layout, dialect),
        st.clear_staging(layout, dialect), st.truncate_staging(layout, dialect),
        st.upsert_from_staging(layout, dialect),
        st.apply_deletes(layout, dialect), st.select_rows(layout, dialect),
        st.select_changes(layout, dialect), st.create_watermarks(dialect),
        st.read_watermark(dialect), st.write_watermark(dialect), st.create_tiering(dialect),
        st.read_tiering(dialect), st.write_tiering(dialect),
    ]:
        parse_back(sql, dialect)


HOSTILE = [
    'x"; drop table users; --', "x`; drop table users; --", "x'; drop table users; --",
    "a b", "a.b", "", "1abc", "x" * 65, "naïve", "a\x00b", "a-b", "[x]",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_table_and_column_names_are_refused(name: str) -> None:
    with pytest.raises(SchemaError):
        TableLayout(name, [("title", "string")])
    with pytest.raises(SchemaError):
        TableLayout("todos", [(name, "string")])
    with pytest.raises(SchemaError):
        TableLayout("todos", [("title", "string")], external_id=None).staging().__class__(
            "todos", [("ok", "string"), (name, "string")]
        )


@pytest.mark.parametrize("qualifier", ["p`; drop", "p.q", "p q", "", 'x"y'])
def test_hostile_dataset_names_are_refused(qualifier: str) -> None:
    with pytest.raises(ValueError):
        TableLayout("todos", [("title", "string")], qualifier=("proj", qualifier))
    with pytest.raises(ValueError):
        st.create_dataset("proj", qualifier)


# Table names are at most MAX_TABLE_NAME_LENGTH long (48), so their staging table's fits too.
@given(hs.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,47}", fullmatch=True))
def test_any_valid_name_is_one_quoted_identifier_in_every_dialect(name: str) -> None:
    layout = TableLayout(name, [(name + "_c", "string")], "hard")
    for dialect in ("postgres", "mysql", "bigquery"):
        tree = parse_back(st.create_table(layout, dialect), dialect)
        assert tree.find(sqlglot.exp.Table).name == name  # type: ignore[union-attr]
        deletes = parse_back(st.apply_deletes(layout, dialect), dialect)
        assert {t.name for t in deletes.find_all(sqlglot.exp.Table)} == {
            name, STAGING_PREFIX + name
        }


def test_values_are_parameters_never_literals() -> None:
    for dialect, marker in (("postgres", "%(now)s"), ("mysql", "%(now)s"), ("bigquery", "@now")):
        assert marker in st.upsert_from_staging(SOFT, dialect)
        assert st.read_watermark(dialect).count("%(" if dialect != "bigquery" else "@") == 2


# A NUL escape, an escaped backslash before ``u0000`` (text, kept), and both in a row; json
# values are JSON text as shipping gives them (canonical JSON, NUL written ``\u0000``).
STORABLE = [
    ("string", "a\x00b\x00", "a\ufffdb\ufffd"),
    ("string", "no nul", "no nul"),
    ("string", "\\u0000", "\\u0000"),
    ("json", '{"k\\u0000":"v\\u0000"}', '{"k\ufffd":"v\ufffd"}'),
    ("json", '["\\\\u0000"]', '["\\\\u0000"]'),
    ("json", '["\\\\\\u0000","\\\\\\\\u0000"]', '["\\\\\ufffd","\\\\\\\\u0000"]'),
    ("json", '"\\u0000\\u0000"', '"\ufffd\ufffd"'),
    ("json", '{"a":[1,null,true]}', '{"a":[1,null,true]}'),
    ("number", 1.5, 1.5),
    ("boolean", False, False),
    ("string", None, None),
    ("json", None, None),
    ("null", None, None),
]


@pytest.mark.parametrize(("kind", "value", "expected"), STORABLE)
def test_postgres_gets_nul_as_the_replacement_character(
    kind: str, value: object, expected: object
) -> None:
    assert st.storable_value(kind, value, "postgres") == expected
    for other in ("mysql", "bigquery"):
        assert st.storable_value(kind, value, other) == value


def _without_nul(value: object) -> object:
    """The reference: decode, replace NUL in every string (keys and values)."""
    if isinstance(value, str):
        return value.replace("\x00", st.NUL_REPLACEMENT)
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


# Strings rich in what matters: NUL, backslashes, the text "u0000", non-ASCII.
_TRICKY = hs.lists(hs.sampled_from(["\x00", "\\", "u0000", "\\u0000", "a", "é", "\ufffd"]),
                   max_size=5).map("".join)
_JSON = hs.recursive(
    hs.none() | hs.booleans() | hs.integers(-9, 9) | _TRICKY,
    lambda inner: hs.lists(inner, max_size=3) | hs.dictionaries(_TRICKY, inner, max_size=3),
    max_leaves=8,
)


@given(_JSON, hs.booleans())
def test_postgres_json_is_the_value_with_nul_replaced_in_every_string(
    value: object, ascii_only: bool
) -> None:
    from lakesync.canonical import canonical_json

    # Canonical JSON writes non-ASCII raw; json.dumps(ensure_ascii) escapes it (U+FFFD too).
    text = json.dumps(value, ensure_ascii=True) if ascii_only else canonical_json(value)
    stored = st.storable_value("json", text, "postgres")
    # Keys that meet after the mapping: the last in the text wins, as in PostgreSQL's jsonb.
    assert json.loads(stored) == _without_nul(json.loads(text))
    assert "\\u0000" not in stored.replace("\\\\", "")


TYPED = TableLayout("ledger", [
    ColumnSpec("id", "integer"), ColumnSpec("amount", "decimal", 38, 9),
    ColumnSpec("big", "decimal", 38, 35), ColumnSpec("at", "timestamp"),
    ColumnSpec("day", "date"), ColumnSpec("blob", "bytes"),
], "hard")


@pytest.mark.parametrize(("dialect", "expected"), [
    ("postgres", '"id" BIGINT, "amount" DECIMAL(38, 9), "big" DECIMAL(38, 35), '
                 '"at" TIMESTAMPTZ, "day" DATE, "blob" BYTEA'),
    ("mysql", "`id` BIGINT, `amount` DECIMAL(38, 9), `big` VARCHAR(40), `at` DATETIME(6), "
              "`day` DATE, `blob` LONGBLOB"),
    ("bigquery", "`id` INT64, `amount` NUMERIC(38, 9), `big` BIGNUMERIC(38, 35), "
                 "`at` TIMESTAMP, `day` DATE, `blob` BYTES"),
])
def test_typed_columns_get_the_mapped_types(dialect: str, expected: str) -> None:
    sql = st.create_table(TYPED, dialect)  # type: ignore[arg-type]
    assert expected in sql
    sqlglot.parse_one(sql, read=st.DIALECTS[dialect])


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "bigquery"])
def test_widening_statements_parse_and_leave_unchanged_columns_alone(dialect: str) -> None:
    wide = TableLayout("ledger", [ColumnSpec("id", "decimal", 38, 9), ColumnSpec("at", "string"),
                                  ColumnSpec("day", "date")])
    found = {
        "postgres": {"id": "bigint", "at": "timestamp with time zone", "day": "date"},
        "mysql": {"id": "bigint(20)", "at": "datetime(6)", "day": "date"},
        "bigquery": {"id": "INTEGER", "at": "TIMESTAMP", "day": "DATE"},
    }[dialect]
    statements = st.widen_columns(wide, found, dialect)  # type: ignore[arg-type]
    assert statements and not any("`day`" in s or '"day"' in s for s in statements)
    for sql in statements:
        if "MODIFY COLUMN" not in sql:  # sqlglot does not read MySQL's MODIFY back
            sqlglot.parse_one(sql, read=st.DIALECTS[dialect])
    same = {"postgres": {"id": "numeric(38,9)", "at": "text", "day": "date"},
            "mysql": {"id": "decimal(38,9)", "at": "longtext", "day": "date"},
            "bigquery": {"id": "NUMERIC(38,9)", "at": "STRING", "day": "DATE"}}[dialect]
    assert st.widen_columns(wide, same, dialect) == []  # type: ignore[arg-type]
