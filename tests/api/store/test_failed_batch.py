"""A push batch that fails part-way is rolled back alone, on every HotLog implementation."""

from __future__ import annotations

import threading

import pytest

from lakesync.api.store._sql import log as sql_log
from lakesync.api.store.base import HotLog, encode_state
from lakesync.delta import RowDelta
from lakesync.merge import RowState


def d(row: str, client: str, **cols: object) -> RowDelta:
    return RowDelta.create("INSERT", "todos", row, client, cols, 1)


def test_a_failing_batch_stores_nothing_and_concurrent_batches_go_on(
    store: HotLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_encode(state: RowState) -> bytes:
        # Fails after the batch's log rows are written: the whole batch must roll back.
        if "boom" in state.cells:
            raise RuntimeError("row state cannot be stored")
        return encode_state(state)

    monkeypatch.setattr(sql_log, "encode_state", failing_encode)
    batches = [[d(f"w{w}-{i}", f"c{w}", x=i) for i in range(3)] for w in range(8)]
    batches[3].append(d("w3-bad", "c3", boom=1))
    start = threading.Barrier(len(batches))
    errors: dict[int, BaseException] = {}

    def push(worker: int) -> None:
        start.wait()
        try:
            store.append("gw1", batches[worker])
        except RuntimeError as exc:
            errors[worker] = exc

    threads = [threading.Thread(target=push, args=(w,)) for w in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert list(errors) == [3]
    log = store.read_log(0, 1000)
    stored = {delta.delta_id for _, _, delta in log}
    assert stored == {x.delta_id for w, b in enumerate(batches) if w != 3 for x in b}
    assert store.head() == log[-1][0]
    assert set(store.read_all_rows("gw1").rows) == {("todos", x.row_id) for _, _, x in log}
    # The failed batch left no trace: its good deltas are new on a retry, stamped after the rest.
    retry = store.append("gw1", batches[3][:3])
    assert len(retry.stored) == 3
    assert retry.stored[0].ingest_hlc > log[-1][0]
