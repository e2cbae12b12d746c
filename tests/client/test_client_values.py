"""No value a gateway serves can wedge a client.

A gateway that predates the value rule (or a hostile one) can serve ``10**400``, ``1e400`` or a
value nested past the limit. The client reads such a cell as null, reports a ``value_error``
event naming it, and keeps syncing: the page is applied, the cursor moves, the outbox pushes.
Values it can hold arrive as every replica holds them (``2**53 + 1`` → ``2**53``).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.client import Event, LakeSyncClient
from lakesync.client._columns import SQL_TYPES, sql_converter, to_sql_value
from lakesync.client.errors import ValidationError
from lakesync.delta import CellError, delta_id
from lakesync.proto import lakesync_pb2 as pb
from lakesync.schema import ColumnSpec
from lakesync.tokens import mint_token
from lakesync.values import MAX_VALUE_DEPTH
from lakesync.wire import decode_pull_response
from lakesync.wsframes import decode_response
from tests.gateway_process import ServerProcess

HUGE = b"1" + b"0" * 400
TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "n", "type": "number"},
        {"name": "tags", "type": "json"},
    ],
}


def _wire_delta(row_id: str, columns: list[tuple[str, bytes]], hlc: int = 1000) -> bytes:
    cols = ",".join(f'{{"column":"{c}","value":{v.decode()}}}' for c, v in columns)
    return (
        f'{{"op":"INSERT","table":"todos","rowId":"{row_id}","clientId":"mallory",'
        f'"columns":[{cols}],"hlc":"{hlc}","deltaId":"{row_id:0>64}"}}'
    ).encode()


def _page(deltas: list[bytes], server_hlc: int) -> bytes:
    return (
        b'{"deltas":['
        + b",".join(deltas)
        + f'],"serverHlc":"{server_hlc}","hasMore":false}}'.encode()
    )


HOSTILE_PAGE = _page(
    [
        _wire_delta("big", [("n", HUGE), ("title", b'"still here"')]),
        _wire_delta("inf", [("n", b"1e400")]),
        _wire_delta("deep", [("tags", b"[" * 100 + b"]" * 100), ("n", b"2")]),
        _wire_delta("wide", [("n", b"9007199254740993"), ("tags", b'{"z":-0.0,"a":[1.0]}')]),
    ],
    100,
)
BAD_CELLS = {("big", "n"), ("inf", "n"), ("deep", "tags")}


@pytest.mark.parametrize(
    "n", [2**63, -(2**63) - 1, 10**400, -(10**400)], ids=["2^63", "-2^63-1", "1e400", "-1e400"]
)
def test_to_sql_value_never_raises_for_a_number_of_any_size(n: int) -> None:
    stored = to_sql_value(ColumnSpec("n", "number"), n)
    expected = float(n) if abs(n) < 2**1000 else math.inf if n > 0 else -math.inf
    assert isinstance(stored, float) and stored == expected
    assert to_sql_value(ColumnSpec("j", "json"), n) == str(n)


_cell_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["12.50", "2024-02-29", "2024-02-29T10:00:00.000000Z", "aGk=", "7"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=4,
)


@given(st.sampled_from([*SQL_TYPES, "decimal(10,2)"]), _cell_values)
def test_a_columns_sql_converter_stores_what_to_sql_value_stores(
    typ: str, value: Any
) -> None:
    spec = ColumnSpec("c", "decimal", precision=10, scale=2) if typ == "decimal(10,2)" else (
        ColumnSpec("c", typ)  # type: ignore[arg-type]
    )
    expected, got = to_sql_value(spec, value), sql_converter(spec)(value)
    assert type(got) is type(expected) and repr(got) == repr(expected)  # NaN and -0.0 too


def test_pull_reply_reads_cells_it_cannot_hold_as_null_and_reports_them() -> None:
    errors: list[CellError] = []
    deltas, server_hlc, has_more = decode_pull_response(HOSTILE_PAGE, errors.append)
    assert (server_hlc, has_more) == (100, False)
    values = {d.row_id: d.values() for d in deltas}
    assert values == {
        "big": {"n": None, "title": "still here"},
        "inf": {"n": None},
        "deep": {"tags": None, "n": 2},
        "wide": {"n": 2**53, "tags": {"z": 0, "a": [1]}},
    }
    assert {(e.row_id, e.column) for e in errors} == BAD_CELLS
    assert all(e.table == "todos" for e in errors)
    by_row = {e.row_id: e.reason for e in errors}
    assert "Infinity" in by_row["big"] and str(MAX_VALUE_DEPTH) in by_row["deep"]


def test_pull_reply_nested_beyond_any_parser_is_a_validation_error() -> None:
    # Too deep to even find where the value ends: the page is refused with a typed error.
    body = _page([_wire_delta("x", [("tags", b"[" * 100_000 + b"]" * 100_000)])], 5)
    with pytest.raises(ValidationError, match="invalid pull response"):
        decode_pull_response(body)


def test_protobuf_cells_are_read_one_by_one() -> None:
    cells = {
        "big": HUGE,
        "inf": b"1e400",
        "deep": b"[" * 100_000 + b"]" * 100_000,  # beyond the recursion limit: still one cell
        "bad": b"\xff",
        "ok": b"1.0",
    }
    msg = pb.SyncResponse(
        deltas=[
            pb.RowDelta(
                op=pb.UPDATE,
                table="todos",
                row_id="r",
                client_id="m",
                hlc=5,
                delta_id="d",
                columns=[pb.ColumnDelta(column=c, value=v) for c, v in cells.items()],
            )
        ],
        server_hlc=9,
    )
    errors: list[CellError] = []
    deltas, server_hlc, _ = decode_response(msg.SerializeToString(), errors.append)
    assert server_hlc == 9
    assert deltas[0].values() == {"big": None, "inf": None, "deep": None, "bad": None, "ok": 1}
    assert [e.column for e in errors] == ["big", "inf", "deep", "bad"]


class _HostileGateway(BaseHTTPRequestHandler):
    """Serves one page of values no replica can hold, then empty pages; records pushes."""

    pushes: list[dict[str, Any]] = []  # noqa: RUF012

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if "/checkpoint" in self.path:
            self._reply(404, b'{"error":"no checkpoint","code":"NOT_FOUND"}')
        elif "since=0&" in self.path:
            self._reply(200, HOSTILE_PAGE)
        else:
            self._reply(200, _page([], 100))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.pushes.append(body)
        n = len(body["deltas"])
        self._reply(200, f'{{"serverHlc":"101","accepted":{n},"deltas":[]}}'.encode())


@pytest.fixture
def hostile_gateway() -> Iterator[str]:
    _HostileGateway.pushes = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_client_keeps_syncing_through_values_it_cannot_hold(hostile_gateway: str) -> None:
    token = mint_token("any-secret-any-secret-any-secret-0123", "bob", "gw1")
    with LakeSyncClient(
        ":memory:", url=hostile_gateway, gateway_id="gw1", token=token, schemas=[TODOS]
    ) as bob:
        events: list[Event] = []
        bob.on("*", events.append)
        bob.insert("todos", "mine", {"title": "offline edit"})
        report = bob.sync(retries=0)
        assert (report.pulled, report.pushed, report.cursor) == (4, 1, 100)
        assert bob.status.queue_depth == 0
        assert [d["rowId"] for p in _HostileGateway.pushes for d in p["deltas"]] == ["mine"]
        rows = {r["row_id"]: r for r in bob.query("select * from todos")}
        assert rows["big"]["title"] == "still here" and rows["big"]["n"] is None
        assert rows["deep"]["tags"] is None and rows["deep"]["n"] == 2
        assert rows["wide"]["n"] == 2**53 and rows["wide"]["tags"] == {"z": 0, "a": [1]}
        errors = [e for e in events if e.kind == "value_error"]
        assert {(e.detail["row_id"], e.detail["column"]) for e in errors} == BAD_CELLS
        assert not [e for e in events if e.kind == "sync_error"]


def _raw_push(
    gw: ServerProcess, gw_id: str, sub: str, row_id: str, value_json: str
) -> httpx.Response:
    """Push ``{n: value}`` as raw JSON text, its deltaId computed the way JavaScript would."""
    hlc = time.time_ns() // 1_000_000 << 16
    value = json.loads(value_json)
    did = delta_id(sub, hlc, "todos", row_id, [{"column": "n", "value": value}])
    body = (
        f'{{"clientId":"{sub}","deltas":[{{"op":"INSERT","table":"todos","rowId":"{row_id}",'
        f'"clientId":"{sub}","columns":[{{"column":"n","value":{value_json}}}],'
        f'"hlc":"{hlc}","deltaId":"{did}"}}]}}'
    )
    return httpx.post(
        f"{gw.url}/v1/sync/{gw_id}/push",
        content=body,
        headers={
            "Authorization": f"Bearer {gw.token(sub, gw_id)}",
            "Content-Type": "application/json",
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_peer_pushing_a_huge_integer_wedges_nobody(
    gateway: ServerProcess, gw_id: str, transport: str
) -> None:
    """Against a real gateway: 10**400 is refused with a 400 naming the cell, 2**53 + 1 is held
    as 2**53 by every client, and a client with pending edits keeps syncing."""
    with LakeSyncClient(
        ":memory:",
        url=gateway.url,
        gateway_id=gw_id,
        token=gateway.token("bob", gw_id),
        schemas=[TODOS],
        transport=transport,  # type: ignore[arg-type]
    ) as bob:
        events: list[Event] = []
        bob.on("*", events.append)
        bob.sync(retries=0)
        r = _raw_push(gateway, gw_id, "mallory", "poison", "1" + "0" * 400)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "VALIDATION_ERROR"
        assert "'poison'" in r.json()["error"] and "'n'" in r.json()["error"]
        assert _raw_push(gateway, gw_id, "mallory", "wide", str(2**53 + 1)).status_code == 200
        bob.insert("todos", "mine", {"title": "edit"})
        bob.sync(retries=0)
        assert bob.status.queue_depth == 0
        assert bob.get("todos", "wide") == {"n": 2**53}
        assert bob.get("todos", "poison") is None
        assert not [e for e in events if e.kind in ("sync_error", "value_error")]
