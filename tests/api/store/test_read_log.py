"""The landing flusher's reads on every store: the whole log, or one gateway's part of it."""

from __future__ import annotations

from lakesync.api.store.base import HotLog
from lakesync.delta import RowDelta


def _d(row: str, hlc: int) -> RowDelta:
    return RowDelta.create("INSERT", "todos", row, "c1", {"n": hlc}, hlc)


def test_read_log_of_one_gateway(store: HotLog) -> None:
    a = store.append("gw1", [_d("a1", 10), _d("a2", 11)]).stored
    b = store.append("gw2", [_d("b1", 12)]).stored
    c = store.append("gw1", [_d("a3", 13)]).stored
    everything = store.read_log(0, 100)
    assert [(i, g) for i, g, _ in everything] == [(e.ingest_hlc, e.gateway_id) for e in a + b + c]
    mine = store.read_log(a[0].ingest_hlc, 1, gateway_id="gw1")
    assert [(i, d.row_id) for i, _, d in mine] == [(a[1].ingest_hlc, "a2")]
    assert [d.row_id for _, _, d in store.read_log(0, 100, gateway_id="gw1")] == ["a1", "a2", "a3"]
    assert store.read_log(0, 100, gateway_id="nobody") == []
