"""One behaviour suite over every destination: ensure the table, apply change sets, read rows,
read changes since a watermark. Real servers (PostgreSQL, MariaDB, the BigQuery emulator)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from lakesync.column_types import decode_value
from lakesync.delta import RowDelta
from lakesync.destinations import base
from lakesync.destinations.base import Change, Destination, DestinationError, typed_change
from lakesync.schema import ColumnSpec
from lakesync.sources import source_row

COLUMNS = [("title", "string"), ("done", "boolean"), ("score", "number"), ("meta", "json")]


def live(dest: Destination, table: str = "todos") -> dict[str, dict[str, object]]:
    layout = dest.layout(table, COLUMNS)
    rows = dest.read_rows(layout)
    return {
        r["row_id"]: {n: r[n] for n, _ in COLUMNS}
        for r in rows
        if r.get("deleted_at") is None
    }


def test_apply_read_update_delete_revive(destination: Destination) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.ensure_table(layout)  # idempotent
    assert destination.read_rows(layout) == []
    assert destination.watermark("todos") is None
    changes = [
        typed_change(layout, "a", {"title": "Buy milk", "done": False, "score": 1.5,
                                   "meta": {"b": [1, 2], "a": None}}),
        typed_change(layout, "b", {"title": "ünïcødé ✓", "done": True}),
        typed_change(layout, "A", {"title": "case matters"}),
    ]
    destination.apply_changes(layout, changes, position=10)
    assert destination.watermark("todos") == 10
    assert live(destination) == {
        "a": {"title": "Buy milk", "done": False, "score": 1.5, "meta": '{"a":null,"b":[1,2]}'},
        "b": {"title": "ünïcødé ✓", "done": True, "score": None, "meta": None},
        "A": {"title": "case matters", "done": None, "score": None, "meta": None},
    }
    rows = {r["row_id"]: r for r in destination.read_rows(layout)}
    assert rows["a"]["props"] == {} and isinstance(rows["a"]["synced_at"], datetime)

    destination.apply_changes(layout, [
        typed_change(layout, "a", {"title": "Buy oat milk", "done": True}),
        typed_change(layout, "b", None),
    ], position=20)
    assert destination.watermark("todos") == 20
    assert live(destination) == {
        "a": {"title": "Buy oat milk", "done": True, "score": None, "meta": None},
        "A": {"title": "case matters", "done": None, "score": None, "meta": None},
    }
    rows = {r["row_id"]: r for r in destination.read_rows(layout)}
    if destination.spec.delete == "soft":
        assert rows["b"]["deleted_at"] is not None
    else:
        assert "b" not in rows

    # Revival: the row comes back with only what the change says; deleted_at cleared.
    destination.apply_changes(layout, [typed_change(layout, "b", {"done": False})])
    assert live(destination)["b"] == {"title": None, "done": False, "score": None, "meta": None}
    assert destination.watermark("todos") == 20  # no position: the watermark stays


def test_reapplying_a_change_set_changes_nothing(destination: Destination) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    changes = [typed_change(layout, f"r{i}", {"title": f"t{i}", "score": i}) for i in range(5)]
    changes.append(typed_change(layout, "r1", None))
    destination.apply_changes(layout, changes, position=5)
    first = live(destination)
    destination.apply_changes(layout, changes, position=5)
    assert live(destination) == first
    assert sorted(first) == ["r0", "r2", "r3", "r4"]


def test_schema_evolution_adds_columns(destination: Destination) -> None:
    old = destination.layout("notes", [("body", "string")])
    destination.ensure_table(old)
    destination.apply_changes(old, [typed_change(old, "n1", {"body": "hi"})])
    new = destination.layout("notes", [("body", "string"), ("pinned", "boolean")])
    destination.ensure_table(new)
    destination.apply_changes(new, [typed_change(new, "n2", {"body": "yo", "pinned": True})])
    rows = {r["row_id"]: r for r in destination.read_rows(new)}
    assert rows["n1"]["pinned"] is None and rows["n1"]["body"] == "hi"
    assert rows["n2"]["pinned"] is True


def test_read_changes_since_a_watermark(destination: Destination) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [typed_change(layout, "old", {"title": "x"})])
    mark = max(r["synced_at"] for r in destination.read_rows(layout))
    assert destination.read_changes(layout, mark) == []
    destination.apply_changes(layout, [typed_change(layout, "new", {"title": "y"})])
    changed = destination.read_changes(layout, mark)
    assert [r["row_id"] for r in changed] == ["new"]
    assert destination.read_changes(layout, datetime(2000, 1, 1, tzinfo=UTC))[0]["row_id"] == "old"


def test_wrongly_typed_values_arrive_as_null(destination: Destination) -> None:
    """A value of the wrong type is null, except in a string column, which reads any value as
    its JSON text (a column widened to string keeps the values of its old type)."""
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [
        typed_change(layout, "w", {"title": 5, "done": "yes", "score": True, "meta": None})
    ])
    assert live(destination)["w"] == {"title": "5", "done": None, "score": None, "meta": None}


@pytest.mark.parametrize("delete_mode", ["hard"])
def test_nul_lands_as_the_replacement_character_in_postgres_only(
    destination: Destination,
) -> None:
    """PostgreSQL's text and jsonb refuse U+0000: there it becomes U+FFFD (in json keys and
    values too; an escaped backslash before ``u0000`` is text and stays), so the change set
    lands whole and a second application changes nothing; the other destinations keep it."""
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    changes = [
        typed_change(layout, "nul", {"title": "a\x00b", "done": True, "score": 0.5,
                                     "meta": {"k\x00": ["\x00", "\\u0000", "\\\x00"]}}),
        typed_change(layout, "plain", {"title": "plain", "meta": {"k": 1}}),
    ]
    destination.apply_changes(layout, changes, position=3)
    if destination.spec.kind == "postgres":
        title, meta = "a\ufffdb", '{"k\ufffd":["\ufffd","\\\\u0000","\\\\\ufffd"]}'
    else:
        title, meta = "a\x00b", '{"k\\u0000":["\\u0000","\\\\u0000","\\\\\\u0000"]}'
    want = {
        "nul": {"title": title, "done": True, "score": 0.5, "meta": meta},
        "plain": {"title": "plain", "done": None, "score": None, "meta": '{"k":1}'},
    }
    assert live(destination) == want
    assert destination.watermark("todos") == 3
    destination.apply_changes(layout, changes, position=3)
    assert live(destination) == want


@pytest.mark.parametrize("delete_mode", ["soft"])
def test_a_failed_change_set_leaves_rows_and_watermark_alone(destination: Destination) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [typed_change(layout, "a", {"title": "kept"})], position=1)
    broken = Change("c", {"meta": "{not json"})  # every destination refuses it as JSON
    with pytest.raises(DestinationError, match="applying changes to 'todos' failed"):
        destination.apply_changes(
            layout, [typed_change(layout, "b", {"title": "lost"}), broken], position=2
        )
    if destination.spec.kind != "bigquery":  # no transactions there: re-runs converge instead
        assert live(destination) == {"a": {"title": "kept", "done": None, "score": None,
                                           "meta": None}}
        assert destination.watermark("todos") == 1


def test_evict_removes_the_given_rows(destination: Destination) -> None:
    """Tiering names the rows to retire (by their last change in the lake): exactly those the
    table holds leave, however recently they were synced; the watermark stays."""
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [typed_change(layout, "old", {"title": "x"}),
                                       typed_change(layout, "gone", {"title": "z"})])
    destination.apply_changes(layout, [typed_change(layout, "gone", None)])
    destination.apply_changes(layout, [typed_change(layout, "new", {"title": "y"})], position=4)
    assert destination.evict(layout, []) == 0
    assert destination.evict(layout, ["never-shipped"]) == 0
    expected = 2 if destination.spec.delete == "soft" else 1  # hard: "gone" already left
    assert destination.evict(layout, ["gone", "old", "never-shipped"]) == expected
    assert [r["row_id"] for r in destination.read_rows(layout)] == ["new"]
    assert destination.watermark("todos") == 4  # tiering leaves shipping where it was
    assert destination.evict(layout, ["gone", "old"]) == 0


def test_evict_records_the_tiering_mark(destination: Destination) -> None:
    """With a mark, evict records it with the deletes (per table); a destination that tiers
    reads it back, the lake (no hot window) keeps none."""
    from lakesync.destinations.base import TieringMark

    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [typed_change(layout, "old", {"title": "x"})], position=3)
    assert destination.tiering_mark("todos") is None
    big = 2**64 - 1  # HLCs are unsigned 64-bit
    assert destination.evict(layout, ["old"], TieringMark(big, 3)) == 1
    assert destination.evict(layout, [], TieringMark(big - 1, 3)) == 0  # nothing aged: moves
    want = None if destination.spec.kind == "lake" else TieringMark(big - 1, 3)
    assert destination.tiering_mark("todos") == want
    assert destination.tiering_mark("other") is None
    assert destination.watermark("todos") == 3


def test_evict_takes_more_rows_than_one_statement_binds(
    destination: Destination, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "EVICT_CHUNK", 2)  # three statements for five rows
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    ids = [f"r{i}" for i in range(base.EVICT_CHUNK + 3)]
    destination.apply_changes(layout, [typed_change(layout, r, {"title": r}) for r in ids])
    assert destination.evict(layout, ids[1:]) == len(ids) - 1
    assert [r["row_id"] for r in destination.read_rows(layout)] == ids[:1]


def test_read_changes_with_a_limit_ends_at_an_instant(destination: Destination) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    for ids in (["a", "b"], ["c"], ["d", "e"]):  # three change sets: three synced_at instants
        destination.apply_changes(layout, [typed_change(layout, i, {"title": i}) for i in ids])
    epoch = datetime(2000, 1, 1, tzinfo=UTC)

    def read(since: datetime, limit: int | None) -> list[str]:
        return [r["row_id"] for r in destination.read_changes(layout, since, limit)]

    assert read(epoch, 1) == ["a", "b"]  # the first instant whole
    assert read(epoch, 3) == ["a", "b", "c"]
    assert read(epoch, 4) == read(epoch, 50) == read(epoch, None) == ["a", "b", "c", "d", "e"]
    first = destination.read_changes(layout, epoch, 1)[-1]["synced_at"]
    assert read(first, 1) == ["c"]
    last = destination.read_changes(layout, epoch)[-1]["synced_at"]
    assert read(last, 1) == []


TYPED = [
    ColumnSpec("id", "integer"),
    ColumnSpec("amount", "decimal", 38, 9),
    ColumnSpec("price", "decimal", 10, 2),
    ColumnSpec("at", "timestamp"),
    ColumnSpec("day", "date"),
    ColumnSpec("blob", "bytes"),
    ColumnSpec("score", "number"),
]
# Edge values in their canonical wire form, as clients push them: 2^62 + 1 and the 64-bit
# limits, 38-digit decimals, microseconds before 1970, dates before 1970, bytes with NUL.
TYPED_ROWS: dict[str, dict[str, Any]] = {
    "big": {"id": "4611686018427387905", "amount": "12345678901234567890123456789.123456789",
            "price": "12.50", "at": "1969-12-31T23:59:59.999999Z", "day": "1969-07-20",
            "blob": "AGEAAA==", "score": 0.1},
    "limits": {"id": "-9223372036854775808", "amount": "-99999999999999999999999999999.999999999",
               "price": "-99999999.99", "at": "1900-01-01T00:00:00.000001Z", "day": "1900-02-28",
               "blob": "", "score": -1.7976931348623157e308},
    "top": {"id": "9223372036854775807", "amount": "0.000000001", "price": "0.00",
            "at": "2024-02-29T12:34:56.000001Z", "day": "9999-12-31", "blob": "/w==",
            "score": 5},
    "safe": {"id": -(2**53), "amount": "0.000000000", "price": "1.05",
             "at": "2038-01-19T03:14:08.000000Z", "day": "2000-02-29", "blob": "AAEC"},
}
# Each destination's own name for each type (what its catalog reports).
DECLARED = {
    "postgres": {"id": "bigint", "amount": "numeric(38,9)", "price": "numeric(10,2)",
                 "at": "timestamp with time zone", "day": "date", "blob": "bytea",
                 "score": "double precision"},
    "mysql": {"id": "bigint(20)", "amount": "decimal(38,9)", "price": "decimal(10,2)",
              "at": "datetime(6)", "day": "date", "blob": "longblob", "score": "double"},
    "bigquery": {"id": "INTEGER", "amount": "NUMERIC(38, 9)", "price": "NUMERIC(10, 2)",
                 "at": "TIMESTAMP", "day": "DATE", "blob": "BYTES", "score": "FLOAT"},
    "lake": {"id": "long", "amount": "decimal(38, 9)", "price": "decimal(10, 2)",
             "at": "timestamptz", "day": "date", "blob": "binary", "score": "double"},
}


def declared_types(dest: Destination, table: str) -> dict[str, str]:
    """The type of each column of ``table`` as the destination's own catalog names it."""
    kind = dest.spec.kind
    if kind == "postgres":
        rows = dest._query(  # type: ignore[attr-defined]
            "select a.attname as n, format_type(a.atttypid, a.atttypmod) as t "
            "from pg_attribute a where a.attrelid = to_regclass(%(t)s) and a.attnum > 0 "
            "and not a.attisdropped", {"t": table}, "types")
        return {r["n"]: r["t"] for r in rows}
    if kind == "mysql":
        rows = dest._query(  # type: ignore[attr-defined]
            "select column_name as n, column_type as t from information_schema.columns "
            "where table_schema = database() and table_name = %(t)s", {"t": table}, "types")
        return {r["n"]: r["t"] for r in rows}
    if kind == "bigquery":
        found = dest._client.get_table(  # type: ignore[attr-defined]
            f"{dest._project}.{dest._dataset}.{table}")  # type: ignore[attr-defined]
        out = {}
        for f in found.schema:
            shape = f"({f.precision}, {f.scale})" if f.precision is not None else ""
            out[f.name] = f"{f.field_type}{shape}"
        return out
    if kind == "lake":
        schema = dest._table(dest.layout(table, [])).schema()  # type: ignore[attr-defined]
        return {f.name: str(f.field_type) for f in schema.fields}
    return {}


def test_typed_columns_keep_every_value(destination: Destination) -> None:
    """Integers beyond 2^53, 38-digit decimals, microsecond timestamps and dates before 1970,
    bytes with NUL: each destination column has its natural type, rows read back as the Python
    values (int, Decimal, aware UTC datetime, date, bytes), and a source pull's cells
    (:func:`lakesync.sources.source_row`) are exactly the wire values that were written."""
    layout = destination.layout("typed", TYPED)
    destination.ensure_table(layout)
    destination.apply_changes(
        layout, [typed_change(layout, r, cells) for r, cells in TYPED_ROWS.items()], position=1
    )
    want = {c.name: c for c in TYPED}
    found = declared_types(destination, "typed")
    for name, sql in DECLARED.get(destination.spec.kind, {}).items():
        assert found[name].lower() == sql.lower(), (name, found[name])
    rows = {r["row_id"]: r for r in destination.read_rows(layout)}
    for row_id, cells in TYPED_ROWS.items():
        row = rows[row_id]
        for name, spec in want.items():
            expected = decode_value(spec, cells.get(name))
            if spec.type == "number" and expected is not None:
                expected = float(expected)
            assert row[name] == expected, (row_id, name, row[name])
            assert type(row[name]) is type(expected), (row_id, name, row[name])
        pulled = source_row("typed", row, layout.columns).cells
        wire = {n: cells.get(n) for n in want}

        served, written = (RowDelta.create("INSERT", "typed", row_id, "c", v, 1).values()
                           for v in (pulled, wire))  # as a pull serves the cells
        assert served == written
        assert {n: type(v) for n, v in served.items()} == {n: type(v) for n, v in written.items()}
    destination.apply_changes(layout, [typed_change(layout, "big", None)], position=2)
    assert {r["row_id"] for r in destination.read_rows(layout)
            if r.get("deleted_at") is None} == {"limits", "top", "safe"}


NARROW = [ColumnSpec("id", "integer"), ColumnSpec("price", "decimal", 10, 2),
          ColumnSpec("count", "integer"), ColumnSpec("code", "integer"),
          ColumnSpec("at", "timestamp"), ColumnSpec("ok", "boolean"),
          ColumnSpec("blob", "bytes"), ColumnSpec("day", "date"), ColumnSpec("meta", "json"),
          ColumnSpec("note", "string")]
WIDE = [ColumnSpec("id", "decimal", 38, 9), ColumnSpec("price", "number"),
        ColumnSpec("count", "number"), ColumnSpec("code", "string"),
        ColumnSpec("at", "string"), ColumnSpec("ok", "string"), ColumnSpec("blob", "string"),
        ColumnSpec("day", "string"), ColumnSpec("meta", "string"), ColumnSpec("note", "string")]
NARROW_ROWS: dict[str, dict[str, Any]] = {
    "a": {"id": "4611686018427387905", "price": "12.50", "count": 3, "code": 7,
          "at": "1969-12-31T23:59:59.999999Z", "ok": True, "blob": "AGEAAA==",
          "day": "1969-07-20", "meta": {"b": [1, 2], "a": None}, "note": "kept"},
    "b": {"id": -5, "price": "-0.01", "count": "-9007199254740993", "code": "-9007199254740993",
          "ok": False, "blob": ""},
}


def test_a_widened_column_keeps_every_value(destination: Destination) -> None:
    """integer → decimal → number and any type → string, applied to a table holding rows:
    each column changes type in place (or is rebuilt), and every row reads as it would if it
    were shipped anew in the new types (a string column: the value's wire text)."""
    narrow = destination.layout("wide", NARROW)
    destination.ensure_table(narrow)
    destination.apply_changes(
        narrow, [typed_change(narrow, r, c) for r, c in NARROW_ROWS.items()], position=4)
    wide = destination.layout("wide", WIDE)
    destination.ensure_table(wide)
    destination.ensure_table(wide)  # idempotent: nothing left to widen
    assert destination.watermark("wide") == 4
    rows = {r["row_id"]: r for r in destination.read_rows(wide)}
    for row_id, cells in NARROW_ROWS.items():
        # What the lake's models read the same cells as in the new types.
        want = typed_change(wide, row_id, cells).values
        got = {n: rows[row_id][n] for n in want}
        assert got == want, row_id
        assert {n: type(v) for n, v in got.items()} == {n: type(v) for n, v in want.items()}
    assert rows["a"]["id"] == Decimal("4611686018427387905.000000000")
    assert rows["a"]["at"] == "1969-12-31T23:59:59.999999Z" and rows["a"]["ok"] == "true"
    assert rows["a"]["blob"] == "AGEAAA==" and rows["b"]["count"] == -9007199254740992.0
    destination.apply_changes(wide, [typed_change(wide, "c", {"code": "x", "meta": "plain",
                                                              "id": "0.500000000"})])
    rows = {r["row_id"]: r for r in destination.read_rows(wide)}
    assert (rows["c"]["code"], rows["c"]["meta"], rows["c"]["id"]) == (
        "x", "plain", Decimal("0.500000000"))


def test_a_migrated_number_column_keeps_its_values(destination: Destination) -> None:
    """``lakesync schema migrate`` retypes a number column (whose values are integers) as an
    integer or a decimal: each destination changes the column, keeping every value."""
    old = destination.layout("qty", [ColumnSpec("n", "number"), ColumnSpec("d", "number")])
    destination.ensure_table(old)
    cells = {"a": {"n": 3, "d": -7}, "b": {"n": -(2**53), "d": 0}, "c": {}}
    destination.apply_changes(old, [typed_change(old, r, c) for r, c in cells.items()])
    new = destination.layout("qty", [ColumnSpec("n", "integer"),
                                     ColumnSpec("d", "decimal", 20, 2)])
    destination.ensure_table(new)
    rows = {r["row_id"]: (r["n"], r["d"]) for r in destination.read_rows(new)}
    assert rows == {"a": (3, Decimal("-7.00")), "b": (-(2**53), Decimal("0.00")),
                    "c": (None, None)}
    assert type(rows["a"][0]) is int
