"""Local replica behaviour with no gateway: writes, outbox, types, schemas, restarts."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lakesync.client import AsyncLakeSyncClient, LakeSyncClient
from lakesync.client.errors import (
    ClientClosedError,
    ConfigError,
    MissingExtraError,
    RowExistsError,
    RowNotFoundError,
    SchemaError,
    ValidationError,
)
from lakesync.tokens import mint_token
from tests.client.test_client_apply import versions
from tests.wire_json import verified

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "n", "type": "number"},
        {"name": "meta", "type": "json"},
    ],
}


def local(path: str | Path = ":memory:", **kw: Any) -> LakeSyncClient:
    return LakeSyncClient(str(path), client_id="c1", schemas=[TODOS], **kw)


def test_query_returns_json_types() -> None:
    with local() as c:
        c.insert("todos", "r1", {"title": "Buy milk", "done": False, "n": 3, "meta": {"a": [1]}})
        c.insert("todos", "r2", {"title": "x", "done": True, "n": 2.5, "meta": [1, "b"]})
        rows = c.query("select row_id, title, done, n, meta from todos order by row_id")
        assert rows == [
            {"row_id": "r1", "title": "Buy milk", "done": False, "n": 3, "meta": {"a": [1]}},
            {"row_id": "r2", "title": "x", "done": True, "n": 2.5, "meta": [1, "b"]},
        ]
        assert rows[0]["done"] is False and isinstance(rows[0]["n"], int)
        assert c.query("select row_id from todos where done = ?", [True]) == [{"row_id": "r2"}]
        # Joins keep the declared-type decoding.
        joined = c.query("select a.done as d from todos a join todos b using (row_id)")
        assert sorted(r["d"] for r in joined) == [False, True]


def test_write_and_outbox_commit_together(tmp_path: Path) -> None:
    with local(tmp_path / "a.db") as c:
        c.insert("todos", "r1", {"title": "a"})
        c.update("todos", "r1", {"title": "b", "done": True})
        c.delete("todos", "r1")
        assert c.queue_depth == 3
        assert c.query("select * from todos") == []
    con = sqlite3.connect(tmp_path / "a.db")
    bodies = [bytes(b) for (b,) in con.execute("select body from _ls_outbox order by seq")]
    import msgspec

    deltas = [verified(msgspec.json.decode(b)) for b in bodies]
    assert [d.op for d in deltas] == ["INSERT", "UPDATE", "DELETE"]
    assert deltas[1].values() == {"title": "b", "done": True}
    assert deltas[0].hlc < deltas[1].hlc < deltas[2].hlc
    assert {d.client_id for d in deltas} == {"c1"}


def test_failed_write_leaves_no_outbox_entry() -> None:
    with local() as c:
        with pytest.raises(SchemaError):
            c.insert("todos", "r1", {"nope": 1})
        with pytest.raises(SchemaError):
            c.insert("todos", "r1", {"done": "yes"})
        with pytest.raises(SchemaError):
            c.insert("other", "r1", {})
        # Text with a lone surrogate has no UTF-8 form: a typed error, not a UnicodeEncodeError.
        with pytest.raises(SchemaError, match="'title': text must be valid Unicode"):
            c.insert("todos", "r1", {"title": "\ud800"})
        with pytest.raises(SchemaError, match="'meta': text must be valid Unicode"):
            c.insert("todos", "r1", {"meta": {"k\udc00": [1]}})
        with pytest.raises(ValidationError, match="row_id must be valid Unicode"):
            c.insert("todos", "\ud800", {"title": "x"})
        assert c.queue_depth == 0
        assert c.query("select * from todos") == []


def test_update_sends_only_changed_columns_and_noop_is_none() -> None:
    with local() as c:
        c.insert("todos", "r1", {"title": "a", "n": 1})
        assert c.update("todos", "r1", {"title": "a", "n": 1}) is None
        change = c.update("todos", "r1", {"title": "a", "n": 2})
        assert change is not None and change.kind == "update"
        assert change.before == {"title": "a", "n": 1} and change.after == {"title": "a", "n": 2}
        assert c.queue_depth == 2


def test_row_existence_errors() -> None:
    with local() as c:
        c.insert("todos", "r1", {"title": "a"})
        with pytest.raises(RowExistsError):
            c.insert("todos", "r1", {"title": "b"})
        with pytest.raises(RowNotFoundError):
            c.update("todos", "zz", {"title": "b"})
        with pytest.raises(RowNotFoundError):
            c.delete("todos", "zz")
        c.delete("todos", "r1")
        # A deleted row can be inserted again: the new write beats the tombstone.
        c.insert("todos", "r1", {"done": True})
        assert c.get("todos", "r1") == {"done": True}
        assert c.query("select title, done from todos") == [{"title": None, "done": True}]


def test_query_is_read_only() -> None:
    with local() as c:
        c.insert("todos", "r1", {"title": "a"})
        for sql in ("delete from todos", "update todos set title = 'x'", "drop table todos"):
            with pytest.raises(ValidationError, match="read-only"):
                c.query(sql)
        with pytest.raises(ValidationError):
            c.query("select * from nowhere")
        assert c.query("select title from todos") == [{"title": "a"}]


def test_restart_keeps_rows_outbox_and_clock(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with local(path) as c:
        c.insert("todos", "r1", {"title": "a"})
        last = c._clock.last
    # A clock that went backwards must not make new writes older than earlier ones.
    with local(path) as c:
        c._clock._physical = lambda: 1_000
        c.update("todos", "r1", {"title": "b"})
        assert c._clock.last > last
        assert c.queue_depth == 2
        assert c.query("select title from todos") == [{"title": "b"}]


def test_schema_evolution_is_additive(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with local(path) as c:
        c.insert("todos", "r1", {"title": "a"})
        assert versions(c._store) == {"todos": 1}
    wider = {**TODOS, "columns": [*TODOS["columns"], {"name": "prio", "type": "number"}]}
    with LakeSyncClient(str(path), client_id="c1", schemas=[wider]) as c:
        c.update("todos", "r1", {"prio": 2})
        assert c.query("select title, prio from todos") == [{"title": "a", "prio": 2}]
        assert versions(c._store) == {"todos": 2}
    retyped = {"table": "todos", "columns": [{"name": "title", "type": "number"}]}
    with pytest.raises(SchemaError, match="cannot change type"):
        LakeSyncClient(str(path), client_id="c1", schemas=[retyped])


def test_reserved_names_rejected() -> None:
    with pytest.raises(SchemaError, match="reserved"):
        LakeSyncClient(":memory:", schemas=[{"table": "_ls_x", "columns": []}])
    bad = {"table": "t", "columns": [{"name": "row_id", "type": "string"}]}
    with pytest.raises(SchemaError, match="reserved"):
        LakeSyncClient(":memory:", schemas=[bad])


def test_client_id_comes_from_token_sub() -> None:
    token = mint_token("s3cret-s3cret-s3cret-s3cret-s3cret", sub="alice", gw="gw1")
    with LakeSyncClient(":memory:", url="http://127.0.0.1:9", gateway_id="gw1", token=token) as c:
        assert c.client_id == "alice"
    calls: list[int] = []

    def fresh() -> str:
        calls.append(1)
        return mint_token("s3cret-s3cret-s3cret-s3cret-s3cret", sub="bob", gw="gw1")

    with LakeSyncClient(":memory:", url="http://127.0.0.1:9", gateway_id="gw1", token=fresh) as c:
        assert c.client_id == "bob" and calls == [1]


def test_token_change_with_pending_edits_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    a = mint_token("s3cret-s3cret-s3cret-s3cret-s3cret", sub="alice", gw="gw1")
    with LakeSyncClient(path, url="http://x", gateway_id="gw1", token=a, schemas=[TODOS]) as c:
        c.insert("todos", "r1", {"title": "a"})
    b = mint_token("s3cret-s3cret-s3cret-s3cret-s3cret", sub="bob", gw="gw1")
    with pytest.raises(ConfigError, match="unsent edits"):
        LakeSyncClient(path, url="http://x", gateway_id="gw1", token=b)


def test_closed_client_raises() -> None:
    c = local()
    c.close()
    c.close()
    with pytest.raises(ClientClosedError):
        c.insert("todos", "r1", {"title": "a"})
    with pytest.raises(ClientClosedError):
        c.query("select 1")
    assert c.status.state == "closed"


def test_local_only_client_cannot_sync() -> None:
    with local() as c, pytest.raises(ConfigError, match="no gateway"):
        c.sync()


def test_arrow_and_pandas_export() -> None:
    with local() as c:
        c.insert("todos", "r1", {"title": "a", "done": True, "n": 1.5, "meta": {"k": 1}})
        table = c.to_arrow("select row_id, title, done, n, meta from todos")
        assert table.column_names == ["row_id", "title", "done", "n", "meta"]
        assert table.to_pylist() == [
            {"row_id": "r1", "title": "a", "done": True, "n": 1.5, "meta": '{"k":1}'}
        ]
        df = c.to_pandas("select title, done from todos")
        assert list(df.columns) == ["title", "done"] and bool(df["done"][0]) is True


def test_export_names_the_extra_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with local() as c:
        with pytest.raises(MissingExtraError, match=r"lakesync\[pipeline\]"):
            c.to_arrow("select 1")
        with pytest.raises(MissingExtraError, match="pandas"):
            c.to_pandas("select 1")


def test_upsert_inserts_then_updates() -> None:
    with local() as c:
        first = c.upsert("todos", "r1", {"title": "a", "n": 1})
        assert first is not None and first.kind == "insert"
        second = c.upsert("todos", "r1", {"n": 2})
        assert second is not None and second.kind == "update"
        assert c.upsert("todos", "r1", {"n": 2}) is None
        assert c.get("todos", "r1") == {"title": "a", "n": 2}
        assert c.queue_depth == 2


def test_client_id_must_match_the_token() -> None:
    token = mint_token("s3cret-s3cret-s3cret-s3cret-s3cret", sub="alice", gw="gw1")
    with pytest.raises(ConfigError, match="differs from the token"):
        LakeSyncClient(":memory:", url="http://x", gateway_id="gw1", token=token, client_id="bob")
    with pytest.raises(ConfigError, match="gateway_id"):
        LakeSyncClient(":memory:", url="http://x", token=token)


@pytest.mark.parametrize("make", [LakeSyncClient, AsyncLakeSyncClient])
def test_an_unknown_keyword_is_refused(make: Any) -> None:
    with pytest.raises(TypeError, match="gatway_id"):
        make(":memory:", client_id="c1", gatway_id="gw1")
