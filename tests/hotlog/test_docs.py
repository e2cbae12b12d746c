"""The DocumentStore port's behaviour suite: named documents per gateway and kind, an update is
one atomic read-modify-write; run on every store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lakesync.hotlog.base import HotLog


def test_documents_by_gateway_kind_and_name(store: HotLog) -> None:
    store.put_doc("gw1", "schema", "todos", {"table": "todos", "columns": []})
    store.put_doc("gw1", "connector", "pg", {"name": "pg"})
    assert store.list_docs("gw1", "schema") == {"todos": {"table": "todos", "columns": []}}
    assert store.list_docs("gw2", "schema") == {}
    store.put_doc("gw0", "schema", "notes", {"table": "notes", "columns": []})
    assert store.docs_of_kind("schema") == [
        ("gw0", "notes", {"table": "notes", "columns": []}),
        ("gw1", "todos", {"table": "todos", "columns": []}),
    ]
    assert store.docs_of_kind("connector") == [("gw1", "pg", {"name": "pg"})]
    assert store.delete_doc("gw1", "connector", "pg")
    assert not store.delete_doc("gw1", "connector", "pg")


def test_concurrent_updates_of_one_document_lose_nothing(store: HotLog) -> None:
    def add(i: int) -> None:
        def change(body: dict[str, Any] | None) -> dict[str, Any]:
            return {"items": [*(body or {"items": []})["items"], i]}

        store.update_doc("gw1", "list", "todo", change)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(store.list_docs("gw1", "list")["todo"]["items"]) == list(range(16))


def test_an_update_that_raises_stores_nothing(store: HotLog) -> None:
    store.put_doc("gw1", "schema", "todos", {"v": 1})

    def refuse(body: dict[str, Any] | None) -> dict[str, Any]:
        raise ValueError(f"no: {body}")

    with pytest.raises(ValueError, match=r"no: \{'v': 1\}"):
        store.update_doc("gw1", "schema", "todos", refuse)
    assert store.update_doc("gw1", "schema", "new", lambda body: {"first": body}) == {"first": None}
    assert store.list_docs("gw1", "schema") == {"todos": {"v": 1}, "new": {"first": None}}


def test_delete_docs_removes_what_the_predicate_names_in_one_gateway_and_kind(
    store: HotLog,
) -> None:
    for i in range(5):
        store.put_doc("gw1", "result", f"k{i}", {"at": i})
    store.put_doc("gw1", "other", "k0", {"at": 0})
    store.put_doc("gw2", "result", "k0", {"at": 0})
    assert store.delete_docs("gw1", "result", lambda body: body["at"] < 3) == 3
    assert store.list_docs("gw1", "result") == {"k3": {"at": 3}, "k4": {"at": 4}}
    assert store.list_docs("gw1", "other") == {"k0": {"at": 0}}
    assert store.list_docs("gw2", "result") == {"k0": {"at": 0}}
