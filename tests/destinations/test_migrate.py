"""``migrate_table`` between any two destinations: rows, deletes and the watermark arrive; a
second run changes nothing. A value holding U+0000 (which MariaDB keeps and PostgreSQL cannot)
arrives as U+FFFD wherever PostgreSQL is on either side, and wedges neither."""

from __future__ import annotations

import pytest

from lakesync.destinations.base import typed_change
from lakesync.destinations.migrate import migrate_table
from tests.destinations.conftest import _drop, open_fresh

COLUMNS = [("title", "string"), ("done", "boolean"), ("n", "number"), ("meta", "json")]


@pytest.mark.parametrize(("source_kind", "target_kind"), [
    ("postgres", "mysql"), ("mysql", "postgres"), ("postgres", "postgres"),
])
def test_migrate_copies_rows_deletes_and_watermark(source_kind: str, target_kind: str) -> None:
    source, source_name = open_fresh(source_kind, "soft")
    target, target_name = open_fresh(target_kind, "hard")
    try:
        layout = source.layout("todos", COLUMNS)
        source.ensure_table(layout)
        source.apply_changes(layout, [
            typed_change(layout, "a", {"title": "x", "done": True, "n": 2.5, "meta": {"k": [1]}}),
            typed_change(layout, "b", {"title": "gone"}),
            typed_change(layout, "z", {"title": "n\x00l", "meta": {"\x00": "\x00"}}),
        ], position=7)
        source.apply_changes(layout, [typed_change(layout, "b", None)], position=9)
        target_layout = target.layout("todos", COLUMNS)
        target.ensure_table(target_layout)
        target.apply_changes(target_layout, [typed_change(target_layout, "b", {"title": "old"})])

        assert migrate_table(source, target, "todos", COLUMNS) == 3
        rows = target.read_rows(target_layout)
        migrated = [(r["row_id"], r["title"], r["done"], r["n"], r["meta"]) for r in rows]
        assert migrated == [
            ("a", "x", True, 2.5, '{"k":[1]}'),
            ("z", "n\ufffdl", None, None, '{"\ufffd":"\ufffd"}'),
        ]  # b was deleted in the source: the hard-delete target drops it
        assert target.watermark("todos") == 9
        migrate_table(source, target, "todos", COLUMNS)
        assert [(r["row_id"], r["title"], r["done"], r["n"], r["meta"])
                for r in target.read_rows(target_layout)] == migrated
    finally:
        source.close()
        target.close()
        _drop(source_kind, source_name)
        _drop(target_kind, target_name)
