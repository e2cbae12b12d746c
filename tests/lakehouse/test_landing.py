"""LandingFlusher: landing rows, position in the snapshot, exactly once across SIGKILLs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.records import LogEntry
from lakesync.hotlog.sharded import ShardedHotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, flushed_position, open_catalog
from lakesync.lakehouse.landing import CRASH_ENV, LandingFlusher, LandingRaceError, landing_rows
from lakesync.lakehouse.settings import LakeSettings
from lakesync.shard_specs import ShardSpec

from .conftest import append_in_order

BIG_HLC = (1 << 64) - 1  # client HLCs are uint64: the landing table must keep values >= 2^63


def _deltas(n: int) -> list[tuple[str, RowDelta]]:
    out = []
    for i in range(n):
        if i % 4 == 3:
            d = RowDelta.create("DELETE", "todos", f"r{i % 3}", "c1", {}, 1000 + i)
        else:
            hlc = BIG_HLC - i if i == 0 else 1000 + i
            d = RowDelta.create(
                "INSERT", "todos", f"r{i % 3}", "c1",
                {"title": f"t{i}", "n": i + 0.5, "ok": True, "meta": {"a": [1, None]}}, hlc,
            )
        out.append(("gw1" if i % 2 else "gw2", d))
    return out


def _recording(log: HotLog, marks: list[int]) -> Callable[[int], None]:
    """The store's ``mark_flushed``, also recording each position it is called with."""

    def mark(position: int) -> None:
        marks.append(position)
        log.mark_flushed(position)

    return mark


@pytest.fixture
def settings(tmp_path: Path) -> LakeSettings:
    s = LakeSettings.from_env(tmp_path / "data", env={})
    init_catalog_tables(s)
    (tmp_path / "data" / "warehouse").mkdir()
    return s


def _landed(settings: LakeSettings) -> list[dict[str, object]]:
    table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    rows: list[dict[str, object]] = table.scan().to_arrow().sort_by("ingest_hlc").to_pylist()
    return rows


def test_flush_writes_every_field_and_records_position(settings: LakeSettings, store: HotLog):
    entries = _deltas(10)
    pos = append_in_order(store, entries)
    marks: list[int] = []
    flusher = LandingFlusher(
        open_catalog(settings), store, batch_size=4, mark_flushed=_recording(store, marks)
    )
    result = flusher.flush()
    assert (result.rows, result.commits, result.position) == (10, 3, pos[9])
    assert marks == [pos[3], pos[7], pos[9]]
    assert store.flushed_position() == pos[9]
    rows = _landed(settings)
    assert [r["delta_id"] for r in rows] == [d.delta_id for _, d in entries]
    first = rows[0]
    assert first["hlc"] == BIG_HLC  # Decimal(20, 0) keeps the full uint64
    assert first["gateway_id"] == "gw2" and first["ingest_hlc"] == pos[0]
    assert first["columns_json"] == (
        '[{"column":"title","value":"t0"},{"column":"n","value":0.5},'
        '{"column":"ok","value":true},{"column":"meta","value":{"a":[1,null]}}]'
    )
    assert first["cells"] == [
        {"column": "title", "value_json": '"t0"'},
        {"column": "n", "value_json": "0.5"},
        {"column": "ok", "value_json": "true"},
        {"column": "meta", "value_json": '{"a":[1,null]}'},
    ]
    assert rows[3]["op"] == "DELETE" and rows[3]["cells"] == []
    # Nothing new: no empty commit, position unchanged.
    assert flusher.flush().commits == 0
    assert flushed_position(open_catalog(settings).load_table(LANDING_IDENTIFIER)) == pos[9]
    # New entries continue after the recorded position, in a fresh flusher.
    update = RowDelta.create("UPDATE", "todos", "r9", "c2", {"n": 1}, 5)
    [later] = append_in_order(store, [("gw1", update)])
    again = LandingFlusher(open_catalog(settings), store).flush()
    assert (again.rows, again.position) == (1, later)
    assert len(_landed(settings)) == 11


class _BusySource:
    """The hot log while pushes go on: every read is followed by a new entry (five at most)."""

    def __init__(self, log: HotLog) -> None:
        self.log = log
        self.pushed: list[int] = []

    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[tuple[int, str, RowDelta]]:
        entries = self.log.read_log(after, limit, gateway_id)
        if len(self.pushed) < 5:
            n = len(self.pushed)
            update = RowDelta.create("UPDATE", "todos", "busy", "c3", {"n": n}, 7000 + n)
            self.pushed += append_in_order(self.log, [("gw1", update)])
        return entries


def test_a_flush_under_steady_pushes_lands_the_tail_it_found_and_ends(
    settings: LakeSettings, store: HotLog
) -> None:
    """Entries appended while a flush commits wait for the next flush: the flush ends after the
    partial batch it read instead of chasing the tail one small commit at a time."""
    pos = append_in_order(store, _deltas(6))
    source = _BusySource(store)
    flusher = LandingFlusher(open_catalog(settings), source, batch_size=4)
    result = flusher.flush()
    assert (result.rows, result.commits, result.position) == (7, 2, source.pushed[0])
    assert pos[5] < source.pushed[0]
    result = flusher.flush()  # lands the entry pushed during the last read, not the next one
    assert (result.rows, result.commits, result.position) == (1, 1, source.pushed[1])
    assert len(_landed(settings)) == 8

def _flush_in_child(settings: LakeSettings, log: Path, marks: Path, crash_at: str | None) -> int:
    """Flush the SQLite hot log at ``log`` in a child process, appending to ``marks`` each
    position it marks flushed."""
    code = (
        "import sys; from pathlib import Path\n"
        "from lakesync.hotlog.sqlite import SqliteHotLog\n"
        "from lakesync.lakehouse.settings import LakeSettings\n"
        "from lakesync.lakehouse.catalog import open_catalog\n"
        "from lakesync.lakehouse.landing import LandingFlusher\n"
        "from lakesync.hlc import HLC\n"
        "log = SqliteHotLog(Path(sys.argv[2]), HLC())\n"
        "def mark(position):\n"
        "    log.mark_flushed(position)\n"
        "    with open(sys.argv[3], 'a') as f:\n"
        "        f.write(f'{position}\\n')\n"
        "s = LakeSettings.from_env(sys.argv[1], env={})\n"
        "LandingFlusher(open_catalog(s), log, batch_size=3, mark_flushed=mark).flush()\n"
        "log.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        env[CRASH_ENV] = crash_at
    proc = subprocess.run(
        [sys.executable, "-c", code, str(settings.data_dir), str(log), str(marks)],
        env=env, capture_output=True, timeout=120, check=False,
    )
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", ["before_commit", "after_commit"])
def test_crash_then_restart_lands_each_delta_exactly_once(
    settings: LakeSettings, tmp_path: Path, crash_at: str
):
    path, marks = tmp_path / "hot.sqlite3", tmp_path / "marks"
    entries = _deltas(10)
    log = SqliteHotLog(path, HLC())
    pos = append_in_order(log, entries)
    log.close()
    assert _flush_in_child(settings, path, marks, crash_at) == -signal.SIGKILL
    landed_after_crash = _landed(settings)
    if crash_at == "before_commit":
        assert landed_after_crash == []  # data files written, never committed: invisible
    else:
        # Committed with its position, but the hot log never heard about it.
        assert len(landed_after_crash) == 3
        assert not marks.exists()
    assert _flush_in_child(settings, path, marks, None) == 0
    counts = Counter(r["delta_id"] for r in _landed(settings))
    assert counts == Counter(d.delta_id for _, d in entries)
    assert set(counts.values()) == {1}
    # after_commit: the restart first re-announces the recovered third position, then each new
    # batch; before_commit: the third position is the restart's own first batch.
    assert [int(p) for p in marks.read_text().split()] == [pos[2], pos[5], pos[8], pos[9]]
    log = SqliteHotLog(path, HLC())
    assert log.flushed_position() == pos[9]
    log.close()


json_values = st.recursive(
    # NaN and ±Infinity are no JSON values: no delta can hold one (lakesync.values).
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@given(values=st.lists(json_values, max_size=4))
def test_columns_json_is_the_canonical_json_of_the_column_list(values: list[object]) -> None:
    cols = {f"c{i}": v for i, v in enumerate(values)}
    delta = RowDelta.create("INSERT", "t", "r", "c", cols, 1)
    row = landing_rows([(1, "gw", delta)], datetime.now(UTC)).to_pylist()[0]
    assert row["columns_json"] == canonical_json(
        [{"column": k, "value": v} for k, v in cols.items()]
    )
    assert [json.loads(c["value_json"]) for c in row["cells"]] == [
        json.loads(canonical_json(v)) for v in cols.values()
    ]


def _entries(start: int, gateways: list[str], n: int) -> list[tuple[str, RowDelta]]:
    return [
        (
            gateways[i % len(gateways)],
            RowDelta.create("INSERT", "todos", f"r{start + i}", "c1", {"n": i}, 1000 + start + i),
        )
        for i in range(n)
    ]


def test_a_gateway_that_cannot_land_is_held_back_and_blocks_no_other(
    settings: LakeSettings, store: HotLog, caplog: pytest.LogCaptureFixture
) -> None:
    """gw3's partition directory cannot be created (a file sits at its path): gw1 and gw2 still
    land and the position moves past gw3's entries; once the path is free, gw3 catches up in
    ingest order and every delta has landed exactly once."""
    log = store
    marks: list[int] = []
    catalog = open_catalog(settings)
    flusher = LandingFlusher(catalog, log, batch_size=4, mark_flushed=_recording(log, marks))
    table_dir = urlparse(catalog.load_table(LANDING_IDENTIFIER).location()).path
    blocker = Path(table_dir) / "data" / "gateway_id=gw3"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    first = _entries(1, ["gw1", "gw2", "gw3"], 9)
    pos = append_in_order(log, first)

    result = flusher.flush()
    assert (result.rows, result.position, result.held) == (6, pos[8], ("gw3",))
    assert marks[-1] == pos[8]  # backpressure counts what every other gateway left behind
    assert {r["gateway_id"] for r in _landed(settings)} == {"gw1", "gw2"}
    assert "gateway 'gw3' cannot be written" in caplog.text

    later = _entries(10, ["gw3", "gw1"], 4)
    pos += append_in_order(log, later)
    result = flusher.flush()  # gw3 is retried first and still fails; gw1 goes on
    assert (result.rows, result.position, result.held) == (2, pos[12], ("gw3",))
    assert "gateway 'gw3' is still held back" in caplog.text
    # A fresh flusher (a restarted gateway) reads the held-back state from the table.
    assert LandingFlusher(open_catalog(settings), log).flush().held == ("gw3",)

    blocker.unlink()
    result = LandingFlusher(open_catalog(settings), log, batch_size=2).flush()
    assert result.held == () and result.position == pos[12]
    rows = _landed(settings)
    counts = Counter(r["delta_id"] for r in rows)
    assert counts == Counter(d.delta_id for _, d in first + later)
    assert set(counts.values()) == {1}
    gw3 = [pos[i] for i, (gw, _) in enumerate(first + later) if gw == "gw3"]
    assert sorted(r["ingest_hlc"] for r in rows if r["gateway_id"] == "gw3") == gw3
    assert "landed late" in caplog.text
    assert LandingFlusher(open_catalog(settings), log).flush().commits == 0


def test_a_flush_overtaken_by_another_process_commits_nothing(
    settings: LakeSettings, store: HotLog
) -> None:
    """A flusher that lost its landing mutex with its session (a PostgreSQL restart mid-flush)
    finds at its commit that another process landed the same entries: it lands nothing (no
    commit retried on top of the other's snapshot) and fails retryably; the next flush starts
    from the other's position."""
    entries = _deltas(6)
    append_in_order(store, entries)
    other = LandingFlusher(open_catalog(settings), store)
    overtaken: list[int] = []

    class Overtaken:  # the hot log as the slow flusher reads it: the other lands meanwhile
        def read_log(self, after: int, limit: int, gateway_id: str | None = None) -> list[LogEntry]:
            read = store.read_log(after, limit, gateway_id)
            if not overtaken:
                overtaken.append(other.flush().rows)
            return read

    slow = LandingFlusher(open_catalog(settings), Overtaken())
    with pytest.raises(LandingRaceError) as raised:
        slow.flush()
    assert raised.value.status == 503
    assert overtaken == [6]
    assert sorted(str(r["delta_id"]) for r in _landed(settings)) == sorted(
        d.delta_id for _, d in entries
    )
    assert slow.flush().commits == 0


def test_a_sharded_store_lands_every_tables_deltas_once(
    settings: LakeSettings, tmp_path: Path
) -> None:
    """Pushes to two stores (served as one) while flushes in small batches run: every delta lands
    once, and both stores are marked flushed through the one position."""
    clock = HLC()
    stores: list[HotLog] = [SqliteHotLog(tmp_path / f"{n}.sqlite3", clock) for n in ("a", "b")]
    sharded = ShardedHotLog(stores, [ShardSpec("events", "unused", ["events"])])
    try:
        flusher = LandingFlusher(
            open_catalog(settings), sharded, batch_size=3, mark_flushed=sharded.mark_flushed
        )
        pushed: list[str] = []

        def push(n: int) -> None:
            for i in range(15):
                table = ("todos", "events")[(n + i) % 2]
                d = RowDelta.create("INSERT", table, f"{n}-{i}", f"c{n}", {"i": i}, 1000 + i)
                sharded.append("gw1", [d])
                pushed.append(d.delta_id)

        threads = [threading.Thread(target=push, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            flusher.flush()
        for t in threads:
            t.join()
        flusher.flush()
        landed = [str(r["delta_id"]) for r in _landed(settings)]
        assert sorted(landed) == sorted(pushed)  # each once
        assert {s.flushed_position() for s in stores} == {sharded.head()}
    finally:
        sharded.close()
