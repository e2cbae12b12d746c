"""A sharded hot log (lakesync.hotlog.sharded): two stores served as one, on two SQLite files and
on two PostgreSQL databases. Pushes are split by table and each store keeps only its tables'
deltas; a failed part fails the push and its retry lands each delta once; pages merged across
the stores, however small, return every delta once with an exact ``has_more``; a store that
refuses connections fails the reads and pushes that need it, and only those."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.delta import RowDelta
from lakesync.errors import ConfigError, ForbiddenError
from lakesync.hlc import HLC
from lakesync.hotlog.base import AppendResult, HotLog, LogEntry
from lakesync.hotlog.ports import HotLogSource, SyncStore
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sharded import ShardedHotLog, clip, merge_pages, open_sharded
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.merge import RowState
from lakesync.shard_specs import ShardSpec
from tests.conftest import allow_connections, drop_pg_database, fresh_pg_database
from tests.gateway_process import free_port
from tests.hotlog.common import RULES, slow_commits
from tests.netns import wait_for

SHARDS = [ShardSpec("events", "unused", ["events", "logs"])]


def delta(table: str, row: str, n: int, client: str = "c1") -> RowDelta:
    return RowDelta.create("INSERT", table, row, client, {"n": n}, n)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[HotLog]]:
    """Two fresh stores sharing one clock: two SQLite files, or two PostgreSQL databases."""
    clock = HLC()
    if request.param == "sqlite":
        made: list[HotLog] = [SqliteHotLog(tmp_path / f"{n}.sqlite3", clock) for n in ("a", "b")]
        yield made
        for s in made:
            s.close()
        return
    urls = [fresh_pg_database(), fresh_pg_database()]
    made = [PostgresHotLog(url, clock, pool_size=2) for url in urls]
    yield made
    for s in made:
        s.close()
    for url in urls:
        drop_pg_database(url)


@pytest.fixture
def sharded(stores: list[HotLog]) -> ShardedHotLog:
    return ShardedHotLog(stores, SHARDS)


def test_it_serves_the_sync_paths_roles(sharded: ShardedHotLog) -> None:
    sync: SyncStore = sharded  # checked by mypy: the sync service and the lake read take it
    source: HotLogSource = sharded
    sharded.ping()
    assert (sync.head(), source.read_log(0, 10)) == (0, [])
    assert list(sharded.stores) == ["default", "events"]


def test_a_push_is_split_by_table(sharded: ShardedHotLog, stores: list[HotLog]) -> None:
    batch = [delta("todos", "t1", 1), delta("events", "e1", 2), delta("logs", "l1", 3),
             delta("todos", "t2", 4)]
    result = sharded.append("gw1", batch)
    assert result.accepted == 4
    # In ingest order (each store stamps its part in turn, from the one clock).
    assert [e.delta.row_id for e in result.stored] == ["t1", "t2", "e1", "l1"]
    held = [[e.delta.table for e in s.read_page("gw1", 0, 100, False).entries] for s in stores]
    assert held == [["todos", "todos"], ["events", "logs"]]
    # The answer's head is a position in both stores: neither stamps at or below it any more.
    assert result.head == max(s.head() for s in stores) == sharded.bound()
    assert all(s.committed_head() == result.head for s in stores)
    assert set(result.rows) == {("todos", "t1"), ("todos", "t2"), ("events", "e1"), ("logs", "l1")}


def test_a_failed_part_fails_the_push_and_the_retry_lands_once(
    sharded: ShardedHotLog, stores: list[HotLog]
) -> None:
    batch = [delta("todos", "t1", 1), delta("events", "e1", 2), delta("todos", "t2", 3)]

    def refuse_events(
        rules: object, deltas: Sequence[RowDelta], states: Mapping[Any, RowState], read: object
    ) -> None:
        if any(d.table == "events" for d in deltas):
            raise ForbiddenError("events refused")

    with pytest.raises(ForbiddenError):
        sharded.append("gw1", batch, refuse_events)
    kept = [len(s.read_page("gw1", 0, 100, False).entries) for s in stores]
    assert kept == [2, 0]  # the default store kept its part
    retry = sharded.append("gw1", batch)
    assert retry.accepted == 3
    assert [e.delta.table for e in retry.stored] == ["events"]
    again = sharded.append("gw1", batch)
    assert (again.accepted, again.stored) == (3, [])
    everything = _pull_all(sharded, "gw1", 2)
    assert sorted(d.delta_id for d in everything) == sorted(d.delta_id for d in batch)


def _pull_all(store: ShardedHotLog, gateway_id: str, limit: int) -> list[RowDelta]:
    """Every page from 0 as a client pulls them (the next cursor: the page's last entry while
    ``has_more``), checking that every page but the last is full."""
    since, seen = 0, []
    while True:
        page = store.read_page(gateway_id, since, limit, False)
        seen += [e.delta for e in page.entries]
        if not page.has_more:
            assert since <= page.head
            return seen
        assert len(page.entries) == limit
        since = page.entries[-1].ingest_hlc


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 100])
def test_small_pages_across_stores_return_every_delta_once(
    sharded: ShardedHotLog, limit: int
) -> None:
    tables = itertools.cycle(["todos", "events", "events", "logs", "todos", "notes"])
    pushed: list[RowDelta] = []
    for batch in range(8):
        deltas = [delta(next(tables), f"r{batch}-{i}", batch * 10 + i) for i in range(batch % 4)]
        sharded.append("gw1", deltas)
        pushed += deltas
    sharded.append("gw2", [delta("events", "other", 1)])
    seen = _pull_all(sharded, "gw1", limit)
    assert sorted(d.delta_id for d in seen) == sorted(d.delta_id for d in pushed)
    assert len(seen) == len(pushed)


def test_pages_are_in_ingest_order_and_resume_from_their_cursor(sharded: ShardedHotLog) -> None:
    first = sharded.append("gw1", [delta("todos", "a", 1), delta("events", "b", 2)])
    page = sharded.read_page("gw1", 0, 1, True)
    assert page.has_more and len(page.entries) == 1
    assert set(page.rows) == {(page.entries[0].delta.table, page.entries[0].delta.row_id)}
    rest = sharded.read_page("gw1", page.entries[0].ingest_hlc, 10, False)
    assert not rest.has_more
    assert {e.delta.row_id for e in [*page.entries, *rest.entries]} == {"a", "b"}
    # A pull that saw everything resumes at the head: later pushes to either store follow.
    sharded.append("gw1", [delta("events", "c", 3), delta("notes", "d", 4)])
    later = sharded.read_page("gw1", rest.head, 10, False)
    assert {e.delta.row_id for e in later.entries} == {"c", "d"}
    assert first.head <= rest.head < later.head


def test_read_log_merges_every_gateway(sharded: ShardedHotLog) -> None:
    sharded.append("gw1", [delta("events", "a", 1)])
    sharded.append("gw2", [delta("todos", "b", 2)])
    sharded.append("gw1", [delta("todos", "c", 3), delta("logs", "d", 4)])
    rows: list[str] = []
    after = 0
    while batch := sharded.read_log(after, 1):
        rows += [e.delta.row_id for e in batch]
        after = batch[-1].ingest_hlc
    assert sorted(rows) == ["a", "b", "c", "d"]
    assert [e.delta.row_id for e in sharded.read_log(0, 10, "gw2")] == ["b"]


def test_rules_are_refused_across_stores(sharded: ShardedHotLog, stores: list[HotLog]) -> None:
    with pytest.raises(ConfigError, match="not served on a sharded hot log"):
        sharded.set_rules("gw1", RULES)
    assert sharded.get_rules("gw1").rules is None
    stores[0].set_rules("gw1", RULES)  # set before the tables were sharded
    with pytest.raises(ConfigError, match="gw1"):
        sharded.get_rules("gw1")


def test_documents_live_in_the_default_store(sharded: ShardedHotLog, stores: list[HotLog]) -> None:
    sharded.put_doc("gw1", "schema", "events", {"x": 1})
    assert stores[0].list_docs("gw1", "schema") == {"events": {"x": 1}}
    assert stores[1].list_docs("gw1", "schema") == {}


def test_the_stores_must_share_a_clock(tmp_path: Path) -> None:
    a, b = SqliteHotLog(tmp_path / "a", HLC()), SqliteHotLog(tmp_path / "b", HLC())
    with pytest.raises(ValueError, match="one clock"):
        ShardedHotLog([a, b], SHARDS)
    a.close()
    b.close()


# -- the merge alone ---------------------------------------------------------------------------
stamps = st.lists(st.integers(1, 10_000), unique=True).map(sorted)


@given(st.lists(stamps, min_size=1, max_size=4), st.integers(1, 10_000), st.integers(1, 5))
def test_merged_pages_take_every_visible_entry_once_in_order(
    logs: list[list[int]], bound: int, limit: int
) -> None:
    """Paging the merge of whole logs up to a bound, each store read as the store does (limit + 1
    entries after the position): every entry at or below the bound once, in ingest order, every
    page ending at an HLC boundary, ``more`` exact."""
    after = 0
    seen: list[tuple[int, int]] = []
    for _ in range(sum(map(len, logs)) + 1):
        reads = [
            [LogEntry(h, "gw", delta("t", f"{i}-{h}", h)) for h in log if h > after][: limit + 1]
            for i, log in enumerate(logs)
        ]
        taken, more = merge_pages([clip(r, bound, limit) for r in reads], limit)
        seen += [(int(e.delta.row_id.split("-")[0]), e.ingest_hlc) for e in taken]
        if taken:
            after = taken[-1].ingest_hlc
        assert more == any(after < h <= bound for log in logs for h in log)
        if not more:
            break
        assert taken  # a page that has more is never empty
    assert [h for _, h in seen] == sorted(h for _, h in seen)
    assert sorted(seen) == sorted((i, h) for i, log in enumerate(logs) for h in log if h <= bound)


def test_a_page_ends_at_an_hlc_boundary() -> None:
    """Two stores may stamp alike (each its own clock): one stamp's entries share a page."""
    a = [LogEntry(h, "gw", delta("t", f"a{h}", h)) for h in (1, 2, 3)]
    b = [LogEntry(h, "gw", delta("t", f"b{h}", h)) for h in (2, 5)]
    taken, more = merge_pages([(a, False), (b, False)], 2)
    assert ([e.delta.row_id for e in taken], more) == (["a1"], True)
    taken, more = merge_pages([(a[1:], False), (b, False)], 1)
    assert ([e.delta.row_id for e in taken], more) == (["a2", "b2"], True)


def test_the_bound_raises_the_floor_of_stores_behind(
    sharded: ShardedHotLog, stores: list[HotLog]
) -> None:
    sharded.append("gw1", [delta("events", "e1", 1)])
    ahead = stores[1].committed_head()
    assert stores[0].committed_head() == ahead  # raised by the push's bound
    # A store's next stamp exceeds its floor even when its clock is behind it.
    assert stores[0].raise_floor(ahead + 1_000_000) == ahead + 1_000_000
    assert sharded.append("gw1", [delta("todos", "t1", 2)]).stored[0].ingest_hlc > ahead + 1_000_000
    assert sharded.bound() == stores[0].head() == stores[1].committed_head()
    # A raise below the floor keeps it.
    assert stores[1].raise_floor(1) == stores[1].committed_head()


# -- a store refusing connections (PostgreSQL) -------------------------------------------------
def _retry(store: ShardedHotLog, deltas: list[RowDelta], results: list[AppendResult]) -> bool:
    """Push ``deltas`` once more as a client retrying a 503 does; whether it was acknowledged."""
    try:
        results.append(store.append("gw1", deltas))
    except psycopg.OperationalError:
        return False
    return True



@pytest.mark.postgres
@pytest.mark.slow
def test_a_store_refusing_connections_fails_only_what_needs_it() -> None:
    clock = HLC()
    urls = [fresh_pg_database(), fresh_pg_database()]
    made: list[HotLog] = [PostgresHotLog(url, clock, pool_size=1) for url in urls]
    sharded = ShardedHotLog(made, SHARDS)
    try:
        sharded.append("gw1", [delta("todos", "t0", 1), delta("events", "e0", 2)])
        allow_connections(urls[1], False)
        late = [delta("todos", "t1", 3), delta("events", "e1", 4)]
        with pytest.raises(psycopg.OperationalError):  # the gateway answers 503
            sharded.append("gw1", late)
        with pytest.raises(psycopg.OperationalError):
            sharded.read_page("gw1", 0, 10, False)
        # A push touching only the healthy store is acknowledged.
        assert sharded.append("gw1", [delta("todos", "t2", 5)]).accepted == 1
        allow_connections(urls[1], True)
        retries: list[AppendResult] = []
        wait_for("the store to take connections again", lambda: _retry(sharded, late, retries))
        # t1 was kept the first time; e1 lands once, whichever retry got through.
        assert [e.delta.row_id for r in retries for e in r.stored] == ["e1"]
        rows = [d.row_id for d in _pull_all(sharded, "gw1", 2)]
        assert sorted(rows) == ["e0", "e1", "t0", "t1", "t2"]
    finally:
        allow_connections(urls[1], True)
        sharded.close()
        for url in urls:
            drop_pg_database(url)


# -- opening the stores ------------------------------------------------------------------------
def test_open_sharded_gives_each_embedded_shard_its_own_file(tmp_path: Path) -> None:
    shards = [ShardSpec("events", "sqlite", ["events"]),
              ShardSpec("audit", f"sqlite:///{tmp_path / 'audit.db'}", ["audit"])]
    store = open_sharded("sqlite", shards, tmp_path, HLC())
    try:
        store.append("gw1", [delta("events", "e", 1), delta("audit", "a", 2), delta("t", "x", 3)])
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in {".sqlite3", ".db"}) == [
            "audit.db", "hotlog-events.sqlite3", "hotlog.sqlite3"]
        assert [len(s.read_page("gw1", 0, 9, False).entries) for s in store.stores.values()] == [
            1, 1, 1]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("default", "shard_url", "needles"),
    [
        ("sqlite", "mysql://nowhere", ["shard 'events'", "unknown store url"]),
        ("sqlite:///x.db", "sqlite:///x.db", ["shard 'events'", "shard 'default'"]),
        ("sqlite", "sqlite:///hotlog.sqlite3", ["shard 'events'", "shard 'default'"]),
    ],
    ids=["unknown-url", "the-default-store", "the-default-file"],
)
def test_a_shard_store_that_cannot_be_opened_is_named(
    tmp_path: Path, default: str, shard_url: str, needles: list[str]
) -> None:
    url = default.replace("x.db", str(tmp_path / "x.db"))
    shard_url = shard_url.replace("x.db", str(tmp_path / "x.db"))
    shard_url = shard_url.replace("///hotlog", f"///{tmp_path}/hotlog")
    shard = ShardSpec("events", shard_url, ["events"])
    with pytest.raises(ConfigError) as raised:
        open_sharded(url, [shard], tmp_path, HLC())
    for needle in needles:
        assert needle in raised.value.message


@pytest.mark.postgres
def test_a_shard_store_refusing_connections_at_start_is_an_outage_naming_it(
    tmp_path: Path, pg_url: str
) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(psycopg.OperationalError, match="shard 'events'"):
        open_sharded(pg_url, [ShardSpec("events", closed, ["events"])], tmp_path, HLC())


def test_rows_are_looked_up_in_the_store_holding_their_table(sharded: ShardedHotLog) -> None:
    sharded.append("gw1", [delta("todos", "t1", 1), delta("events", "e1", 2, client="c2")])
    sharded.append("gw1", [delta("events", "e2", 3), delta("logs", "l1", 4)])
    keys = [("todos", "t1"), ("events", "e1"), ("logs", "l1"), ("events", "none")]
    assert set(sharded.read_rows("gw1", keys)) == set(keys[:3])
    assert sharded.row_ids("gw1", "events", None, 10) == ["e1", "e2"]
    assert sorted(sharded.rows_written_by("gw1", "c1")) == sorted(
        [("todos", "t1"), ("events", "e2"), ("logs", "l1")])
    assert sharded.rows_written_among("gw1", "c2", keys) == {("events", "e1")}
    assert sharded.rows_written_if_few("gw1", "c2", 10) == {("events", "e1")}
    history = sharded.row_history("gw1", keys[:3], 0, sharded.head())
    assert {k: [d.row_id for _, d in later] for k, (_, later) in history.items()} == {
        ("todos", "t1"): ["t1"], ("events", "e1"): ["e1"], ("logs", "l1"): ["l1"]}


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_pushes_and_small_pages_never_skip_a_later_commit() -> None:
    """Pushes to two stores whose commits are slow, and pullers paging as clients do: each puller
    sees every delta once. Without the floors a page's cursor passes a stamp that a store commits
    later, and every puller misses some."""
    clock = HLC()
    urls = [fresh_pg_database(), fresh_pg_database()]
    made: list[HotLog] = [PostgresHotLog(url, clock) for url in urls]
    sharded = ShardedHotLog(made, SHARDS)
    try:
        for url in urls:
            slow_commits(url, 0.03)
        pushed: list[str] = []
        done = threading.Event()

        def push(n: int) -> None:
            for i in range(40):
                d = delta(("todos", "events")[n % 2], f"{n}-{i}", i, client=f"c{n}")
                sharded.append("gw1", [d])
                pushed.append(d.delta_id)

        seen: list[list[str]] = [[], [], []]

        def pull(mine: list[str]) -> None:
            since = 0
            while True:
                finished = done.is_set()
                page = sharded.read_page("gw1", since, 3, False)
                mine += [e.delta.delta_id for e in page.entries]
                since = page.entries[-1].ingest_hlc if page.has_more else max(page.head, since)
                if finished and not page.has_more:
                    return

        pushers = [threading.Thread(target=push, args=(n,)) for n in range(4)]
        pullers = [threading.Thread(target=pull, args=(mine,)) for mine in seen]
        for t in [*pushers, *pullers]:
            t.start()
        for t in pushers:
            t.join()
        done.set()
        for t in pullers:
            t.join()
        for mine in seen:
            assert len(mine) == len(set(mine)) == len(pushed)
            assert set(mine) == set(pushed)
    finally:
        sharded.close()
        for url in urls:
            drop_pg_database(url)


def test_checkpoints_live_in_the_default_store_and_bound_each_stores_trim(
    sharded: ShardedHotLog, stores: list[HotLog]
) -> None:
    sharded.append("gw1", [delta("todos", "t1", 1), delta("events", "e1", 2)])
    upto = sharded.head()
    sharded.append("gw1", [delta("events", "e2", 3), delta("todos", "t2", 4)])
    sharded.stage_checkpoint_chunk("gw1", upto, 0, b"chunk")
    assert sharded.publish_checkpoint("gw1", upto, 1, 2)
    info = sharded.checkpoint("gw1")
    assert info is not None and (info.position, info.chunks, info.trimmed) == (upto, 1, 0)
    assert sharded.checkpoint_chunk("gw1", upto, 0) == b"chunk"
    assert stores[1].checkpoint_chunk("gw1", upto, 0) is None  # chunks in the default store
    # Trimming stops at the checkpoint and at what landed, in every store.
    sharded.mark_flushed(sharded.head())
    assert sharded.trim_log("gw1", sharded.head()) == 2
    assert [[e.delta.row_id for e in s.read_page("gw1", 0, 9, False).entries] for s in stores] == [
        ["t2"], ["e2"]]
    horizon = sharded.trimmed_through("gw1")
    assert horizon == max(s.trimmed_through("gw1") for s in stores) > 0
    checkpoint = sharded.checkpoint("gw1")
    assert checkpoint is not None and checkpoint.trimmed == horizon
    # An older checkpoint is refused, and records nothing in the other stores.
    assert not sharded.publish_checkpoint("gw1", upto - 1, 0, 0)
    assert [s.checkpoint("gw1").position for s in stores] == [upto, upto]  # type: ignore[union-attr]
