"""Table schemas (docs/protocol.md §10): parsing, reserved names, additive evolution, delta
checks."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.delta import RowDelta
from lakesync.errors import SchemaError
from lakesync.schema import (
    ColumnSpec,
    TableSchema,
    check_delta,
    evolve,
    merge_declared,
    parse_schema,
    schema_to_wire,
)

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "priority", "type": "number"},
        {"name": "meta", "type": "json"},
        {"name": "nothing", "type": "null"},
    ],
}


def test_parse_schema_full_document() -> None:
    doc = {**TODOS, "primaryKey": ["title"], "softDelete": True, "externalIdColumn": "title"}
    schema = parse_schema(doc)
    assert schema.table == "todos"
    assert schema.columns[0] == ColumnSpec("title", "string")
    assert schema.primary_key == ["title"]
    assert schema.soft_delete is True
    assert schema.external_id_column == "title"
    assert schema.column_types() == {
        "title": "string",
        "done": "boolean",
        "priority": "number",
        "meta": "json",
        "nothing": "null",
    }
    assert schema_to_wire(schema) == doc
    assert parse_schema(schema_to_wire(schema)) == schema


def test_parse_schema_defaults() -> None:
    schema = parse_schema(TODOS)
    assert schema.primary_key is None
    assert schema.soft_delete is False
    assert schema.external_id_column is None
    assert schema_to_wire(schema) == TODOS


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({**TODOS, "table": "bad-name"}, "'bad-name'"),
        ({**TODOS, "table": "t; drop table x"}, "identifiers must match"),
        ({**TODOS, "columns": [{"name": "1st", "type": "string"}]}, "'1st'"),
        ({**TODOS, "columns": [{"name": "a", "type": "int64"}]}, "'int64'"),
        ({**TODOS, "columns": [{"name": "a", "type": "string", "scale": 2}]}, "only a decimal"),
        ({**TODOS, "columns": [{"name": "a", "type": "decimal", "precision": 39}]}, "1..38"),
        (
            {**TODOS, "columns": [{"name": "a", "type": "decimal", "precision": 4, "scale": 5}]},
            "scale",
        ),
        ({**TODOS, "columns": [{"name": "a"}]}, "type"),
        ({"columns": []}, "table"),
        ({**TODOS, "bogus": 1}, "bogus"),
        (
            {
                **TODOS,
                "columns": [{"name": "a", "type": "string"}, {"name": "A", "type": "number"}],
            },
            "appears twice",
        ),
        ({**TODOS, "primaryKey": ["nope"]}, "'nope'"),
        ({**TODOS, "externalIdColumn": "nope"}, "'nope'"),
        ("todos", "table schema"),
    ],
)
def test_invalid_schemas_are_rejected(doc: object, needle: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_schema(doc)
    assert needle in info.value.message
    assert info.value.status == 422


@pytest.mark.parametrize(
    "name", ["row_id", "props", "synced_at", "deleted_at", "gateway_id", "Row_Id"]
)
def test_reserved_column_names_are_rejected(name: str) -> None:
    with pytest.raises(SchemaError, match="reserved"):
        parse_schema({"table": "t", "columns": [{"name": name, "type": "string"}]})


def test_a_table_name_too_long_for_its_staging_table_is_refused() -> None:
    assert parse_schema({**TODOS, "table": "t" * 48}).table == "t" * 48
    with pytest.raises(SchemaError, match="too long: at most 48 characters"):
        parse_schema({**TODOS, "table": "t" * 49})


def test_primary_key_may_name_row_id() -> None:
    assert parse_schema({**TODOS, "primaryKey": ["row_id"]}).primary_key == ["row_id"]


def _schema(*cols: tuple[str, str], table: str = "todos") -> TableSchema:
    return parse_schema({"table": table, "columns": [{"name": n, "type": t} for n, t in cols]})


def test_evolve_additive_is_accepted() -> None:
    old = _schema(("title", "string"))
    new = _schema(("title", "string"), ("due", "number"))
    assert evolve(old, new) == new
    assert evolve(old, old) == old


@pytest.mark.parametrize(
    ("new", "needle"),
    [
        (_schema(("due", "number")), "cannot be removed"),
        (_schema(("title", "number")), "cannot change type from string to number"),
        (_schema(("title", "string"), table="other"), "cannot evolve"),
    ],
)
def test_evolve_rejects_removal_retype_and_rename(new: TableSchema, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        evolve(_schema(("title", "string")), new)


def _update(**cols: Any) -> RowDelta:
    return RowDelta.create("UPDATE", "todos", "r1", "c1", cols, 1)


@pytest.mark.parametrize(
    "cols",
    [
        {"title": "x", "done": True, "priority": 1, "meta": {"a": [1]}, "nothing": None},
        {"priority": 1.5},
        {"title": None, "done": None, "priority": None},  # null fits every type
        {"meta": "a string is JSON too"},
        {},
    ],
)
def test_check_delta_accepts_matching_values(cols: dict[str, Any]) -> None:
    check_delta(parse_schema(TODOS), _update(**cols))


@pytest.mark.parametrize(
    ("cols", "needle"),
    [
        ({"unknown": 1}, "no column 'unknown'"),
        ({"title": 5}, "'title' is declared string"),
        ({"done": 1}, "'done' is declared boolean"),
        ({"priority": True}, "'priority' is declared number"),  # a boolean is not a number
        ({"priority": "1"}, "'priority' is declared number"),
        ({"nothing": 0}, "'nothing' is declared null"),
        ({"title": "a\ud800"}, "'title': text must be valid Unicode"),  # lone surrogate
    ],
)
def test_check_delta_rejects_unknown_columns_and_wrong_types(
    cols: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SchemaError, match=needle):
        check_delta(parse_schema(TODOS), _update(**cols))


def test_check_delta_accepts_a_delete() -> None:
    check_delta(parse_schema(TODOS), RowDelta.create("DELETE", "todos", "r1", "c1", {}, 1))


@pytest.mark.parametrize("name", ["_hlc", "_changed_at", "_ingest_hlc", "Row_Id"])
def test_lake_bookkeeping_columns_are_reserved(name: str) -> None:
    with pytest.raises(SchemaError, match="reserved"):
        parse_schema({"table": "t", "columns": [{"name": name, "type": "string"}]})


def _table(*cols: str, **options: Any) -> TableSchema:
    columns = [{"name": c.split(":")[0], "type": c.split(":")[1]} for c in cols]
    return parse_schema({"table": "todos", "columns": columns, **options})


def test_merge_declared_keeps_admin_columns_and_adds_declared_ones() -> None:
    stored = _table("title:string", "stars:number")  # stars came through the admin API
    declared = _table("title:string", "done:boolean")
    merged, conflicts = merge_declared(stored, declared, _table("title:string"))
    assert merged == _table("title:string", "stars:number", "done:boolean")
    assert conflicts == []


def test_merge_declared_keeps_the_stored_type_and_says_so() -> None:
    stored = _table("title:string", "n:number")
    merged, conflicts = merge_declared(stored, _table("title:json", "N:string"), None)
    assert merged == stored
    assert len(conflicts) == 2
    assert "'title' of 'todos' is string in the store but declared 'title' json" in conflicts[0]
    assert "declared 'N' string; keeping 'n' number" in conflicts[1]


def test_merge_declared_options_follow_the_file_only_when_it_changed_them() -> None:
    applied = _table("title:string")
    admin = _table("title:string", softDelete=True)
    # The file still says what it said when applied: the admin's softDelete stays.
    merged, conflicts = merge_declared(admin, _table("title:string", "x:number"), applied)
    assert merged.soft_delete and conflicts == []
    # The file changed its options: they win, and replacing the admin's is a conflict.
    declared = _table("title:string", primaryKey=["title"])
    merged, conflicts = merge_declared(admin, declared, applied)
    assert merged.primary_key == ["title"] and not merged.soft_delete
    assert len(conflicts) == 1 and "as declared" in conflicts[0]
    # Options the file set before are no conflict when the file changes them again.
    merged, conflicts = merge_declared(declared, _table("title:string"), declared)
    assert merged.primary_key is None and conflicts == []


def test_widened_keeps_stored_columns_and_appends_new_ones() -> None:
    from lakesync.schema import evolve, widened

    stored = parse_schema(
        {
            "table": "logs",
            "columns": [{"name": "message", "type": "string"}, {"name": "level", "type": "string"}],
        }
    )
    base = parse_schema(
        {
            "table": "logs",
            "columns": [{"name": "message", "type": "string"}, {"name": "host", "type": "string"}],
        }
    )
    wide = widened(stored, base)
    assert [c.name for c in wide.columns] == ["message", "level", "host"]
    assert evolve(stored, wide) == wide
    changed = parse_schema({"table": "logs", "columns": [{"name": "level", "type": "number"}]})
    with pytest.raises(SchemaError, match="cannot change type"):
        evolve(stored, widened(stored, changed))


def _typed(*cols: dict[str, Any]) -> TableSchema:
    return parse_schema({"table": "todos", "columns": list(cols)})


def test_a_decimal_gets_its_default_precision_and_scale_explicitly() -> None:
    schema = _typed({"name": "amount", "type": "decimal"})
    assert schema.columns[0] == ColumnSpec("amount", "decimal", precision=38, scale=9)
    assert schema_to_wire(schema)["columns"] == [
        {"name": "amount", "type": "decimal", "precision": 38, "scale": 9}
    ]


def test_typed_columns_keep_their_public_shape() -> None:
    cols = [
        {"name": "id", "type": "integer", "nullable": False},
        {"name": "amount", "type": "decimal", "precision": 10, "scale": 2},
        {"name": "at", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "blob", "type": "bytes"},
    ]
    assert schema_to_wire(_typed(*cols))["columns"] == cols


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"type": "integer"}, {"type": "decimal", "precision": 38, "scale": 9}),
        ({"type": "integer"}, {"type": "number"}),
        ({"type": "decimal", "precision": 10, "scale": 2}, {"type": "number"}),
        (
            {"type": "decimal", "precision": 10, "scale": 2},
            {"type": "decimal", "precision": 12, "scale": 4},
        ),
        ({"type": "timestamp"}, {"type": "string"}),
        ({"type": "integer", "nullable": False}, {"type": "integer"}),
    ],
)
def test_evolve_accepts_a_widening(old: dict[str, Any], new: dict[str, Any]) -> None:
    new_schema = _typed({"name": "c", **new})
    assert evolve(_typed({"name": "c", **old}), new_schema) == new_schema


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ({"type": "number"}, {"type": "integer"}, "only widening is allowed"),
        (
            {"type": "decimal", "precision": 10, "scale": 2},
            {"type": "decimal", "precision": 10, "scale": 4},
            "as many integer digits, 8",
        ),
        (
            {"type": "integer"},
            {"type": "decimal", "precision": 10, "scale": 2},
            "precision - scale",
        ),
        ({"type": "integer"}, {"type": "integer", "nullable": False}, "cannot become not nullable"),
        ({"type": "string"}, {"type": "timestamp"}, "add a new column"),
    ],
)
def test_evolve_refuses_a_narrowing_and_says_what_to_do(
    old: dict[str, Any], new: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SchemaError, match=needle):
        evolve(_typed({"name": "c", **old}), _typed({"name": "c", **new}))


def test_evolve_refuses_a_new_column_that_is_not_nullable() -> None:
    old = _typed({"name": "c", "type": "integer"})
    with pytest.raises(SchemaError, match="'d' added to 'todos' must be nullable"):
        evolve(
            old,
            _typed(
                {"name": "c", "type": "integer"}, {"name": "d", "type": "date", "nullable": False}
            ),
        )


def test_merge_declared_applies_a_declared_widening() -> None:
    stored = _typed({"name": "n", "type": "integer"}, {"name": "s", "type": "string"})
    declared = _typed(
        {"name": "n", "type": "decimal", "precision": 30, "scale": 2},
        {"name": "s", "type": "integer"},
    )
    merged, conflicts = merge_declared(stored, declared, None)
    assert merged == _typed(
        {"name": "n", "type": "decimal", "precision": 30, "scale": 2},
        {"name": "s", "type": "string"},
    )
    assert len(conflicts) == 1
    assert "'s' of 'todos' is string in the store but declared 's' integer" in conflicts[0]
    assert "only widening" in conflicts[0]


def test_check_delta_names_row_column_type_and_canonical_form() -> None:
    schema = _typed(
        {"name": "id", "type": "integer"},
        {"name": "amount", "type": "decimal", "precision": 10, "scale": 2},
    )
    with pytest.raises(SchemaError) as info:
        check_delta(schema, RowDelta.create("UPDATE", "todos", "r9", "c1", {"amount": "12.5"}, 1))
    message = info.value.message
    assert "row 'r9'" in message and "'amount'" in message
    assert "decimal(10,2)" in message and '"12.50"' in message
    with pytest.raises(SchemaError, match="within ±2\\^53 an integer is sent as a JSON number"):
        check_delta(schema, RowDelta.create("UPDATE", "todos", "r9", "c1", {"id": "5"}, 1))


def test_an_insert_must_set_a_column_that_is_not_nullable() -> None:
    schema = _typed(
        {"name": "id", "type": "integer", "nullable": False}, {"name": "x", "type": "string"}
    )
    check_delta(schema, RowDelta.create("INSERT", "todos", "r1", "c1", {"id": 1}, 1))
    check_delta(schema, RowDelta.create("UPDATE", "todos", "r1", "c1", {"x": "a"}, 1))
    with pytest.raises(SchemaError, match="'id' is not nullable: an INSERT must set it"):
        check_delta(schema, RowDelta.create("INSERT", "todos", "r1", "c1", {"x": "a"}, 1))
    with pytest.raises(SchemaError, match="'id' is not nullable"):
        check_delta(schema, RowDelta.create("UPDATE", "todos", "r1", "c1", {"id": None}, 1))
