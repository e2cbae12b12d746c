"""The WebSocket fan-out (:mod:`lakesync.api.services.hub`), with connections whose ``send`` the
test controls: a broadcast is computed and encoded once per view; a receiver that stops taking
frames is closed with 4408 once its send queue (frames or bytes) is full, and the others are
served on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.api.services.hub import Connection, Hub
from lakesync.delta import RowDelta
from lakesync.hotlog.base import LogEntry, RowKey, RowRecord, RulesRecord
from lakesync.merge import RowState, apply_delta
from lakesync.rules import parse_rules
from lakesync.views import Reader, SnapshotCache, ViewHistory, effective_rules, page_view
from lakesync.wsframes import decode_server_frame
from tests.api.helpers import delta

EVERYTHING = RulesRecord(None, 0)


def test_a_receiver_too_slow_to_take_frames_is_closed_with_4408() -> None:
    async def scenario() -> None:
        hub = Hub(0)
        stuck = asyncio.Event()  # never set: the slow socket never finishes a send
        closed: list[tuple[int, str]] = []
        served: list[bytes] = []

        async def send_never(frame: bytes) -> None:
            await stuck.wait()

        async def send(frame: bytes) -> None:
            served.append(frame)

        async def close_slow(code: int, reason: str) -> None:
            closed.append((code, reason))

        async def close_other(code: int, reason: str) -> None:
            raise AssertionError(f"a receiver that keeps up was closed: {code} {reason}")

        slow = Connection("gw1", "slow", {"sub": "slow"}, 0, send_never, close_slow, False)
        other = Connection("gw1", "other", {"sub": "other"}, 0, send, close_other, False)
        for conn in (slow, other):
            hub.add(conn)
            conn.accepted.set()
        ingest = iter(range(1, 10_000))

        async def broadcast() -> None:
            entry = LogEntry(next(ingest), "gw1", delta("INSERT", "r", "writer", v=1))
            hub.publish("gw1", [entry], {}, EVERYTHING, None)
            for _ in range(3):  # let both senders take what they can
                await asyncio.sleep(0)

        await broadcast()  # the slow socket's sender takes it and stalls in send
        assert slow.outbox.empty()
        for _ in range(slow.outbox.maxsize):
            await broadcast()
        assert slow.outbox.full() and closed == []
        await broadcast()  # one more than it can hold
        assert closed == [(4408, "too slow: resync by pull")]
        assert len(served) == slow.outbox.maxsize + 2  # the other receiver got every frame
        for conn in (slow, other):
            await hub.remove(conn)
        assert hub.count == 0

    asyncio.run(scenario())


TEAMS = RulesRecord(
    parse_rules(
        {
            "version": 1,
            "buckets": [
                {"name": "team", "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
            ],
        }
    ),
    1,
)


async def until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Let the hub's sender tasks run until ``check`` holds; fail naming ``what`` after
    ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.01)


def _stored(ingest: int, d: RowDelta) -> tuple[list[LogEntry], dict[RowKey, RowRecord]]:
    state = RowState()
    apply_delta(state, d)
    return [LogEntry(ingest, "gw1", d)], {(d.table, d.row_id): RowRecord(state, ingest)}


def test_broadcasts_are_computed_and_encoded_once_per_view() -> None:
    """Receivers of one view get the very same bytes (one encoding, shared); receivers of
    another view get their own rows only; the writer gets no echo."""

    async def scenario() -> None:
        hub = Hub(0)
        got: dict[str, list[bytes]] = {}

        def connect(sub: str, team: str) -> Connection:
            async def send(frame: bytes) -> None:
                got.setdefault(sub, []).append(frame)

            async def close(code: int, reason: str) -> None:
                raise AssertionError(f"{sub} closed: {code} {reason}")

            conn = Connection("gw1", sub, {"sub": sub, "team": team}, 0, send, close, False)
            hub.add(conn)
            conn.accepted.set()
            return conn

        writer = connect("writer", "red")
        for sub, team in (("a1", "red"), ("a2", "red"), ("b1", "blue")):
            connect(sub, team)
        red = delta("INSERT", "r1", "writer", hlc=100, team="red")
        hub.publish("gw1", *_stored(1000, red), TEAMS, writer, SnapshotCache())
        blue = delta("INSERT", "r2", "writer", hlc=200, team="blue")
        hub.publish("gw1", *_stored(2000, blue), TEAMS, writer, SnapshotCache())
        await until("a frame at each receiver", lambda: all(got.get(s) for s in ("a1", "a2", "b1")))
        assert sorted(got) == ["a1", "a2", "b1"]  # no echo to the writer
        assert len(got["a1"]) == len(got["a2"]) == len(got["b1"]) == 1
        assert got["a1"][0] is got["a2"][0]  # one encoding for the view
        for sub, row in (("a1", "r1"), ("b1", "r2")):
            frame = decode_server_frame(got[sub][0])
            assert frame.broadcast and {x.row_id for x in frame.deltas} == {row}
            assert next(x for x in frame.deltas if x.client_id == "writer").columns
        for conn in list(hub._by_gw["gw1"]):
            await hub.remove(conn)

    asyncio.run(scenario())


def test_a_client_without_view_evictions_gets_broadcasts_at_server_hlc_0() -> None:
    """LakeSync v1 moves its cursor to a broadcast's serverHlc: a client without view evictions
    gets 0 (it keeps its cursor), the others the ingest stamp; with rules and without."""

    async def scenario() -> None:
        hub = Hub(0)
        got: dict[str, list[bytes]] = {}

        def connect(sub: str, whole_rows: bool) -> Connection:
            async def send(frame: bytes) -> None:
                got.setdefault(sub, []).append(frame)

            async def close(code: int, reason: str) -> None:
                raise AssertionError(f"{sub} closed: {code} {reason}")

            claims = {"sub": sub, "team": "red"}
            conn = Connection("gw1", sub, claims, 0, send, close, whole_rows)
            hub.add(conn)
            conn.accepted.set()
            return conn

        connect("v1", True)
        connect("py", False)
        for ingest, rules in ((1000, EVERYTHING), (2000, TEAMS)):
            d = delta("INSERT", f"r{ingest}", "writer", hlc=ingest - 1, team="red")
            hub.publish("gw1", *_stored(ingest, d), rules, None, SnapshotCache())
        await until("two frames at each receiver", lambda: all(
            len(got.get(s, [])) == 2 for s in ("v1", "py")))
        for sub, stamps in (("v1", [0, 0]), ("py", [1000, 2000])):
            frames = [decode_server_frame(f) for f in got[sub]]
            assert [f.server_hlc for f in frames] == stamps
            assert [{x.row_id for x in f.deltas} for f in frames] == [{"r1000"}, {"r2000"}]
        for conn in list(hub._by_gw["gw1"]):
            await hub.remove(conn)

    asyncio.run(scenario())


def test_a_send_queue_is_bounded_in_bytes_and_its_receiver_dropped_with_4408() -> None:
    """A receiver whose queued bytes would pass ``send_queue_bytes`` is dropped at once: it is
    closed with 4408, unregistered, its queue freed and sent nothing more; others go on."""

    async def scenario() -> None:
        dropped_on: list[str] = []
        hub = Hub(0, send_queue_bytes=1000, on_drop=dropped_on.append)
        stuck = asyncio.Event()
        closed: list[int] = []
        served: list[bytes] = []

        async def send_never(frame: bytes) -> None:
            await stuck.wait()

        async def send(frame: bytes) -> None:
            served.append(frame)

        async def close_slow(code: int, reason: str) -> None:
            closed.append(code)

        async def close_other(code: int, reason: str) -> None:
            raise AssertionError("a receiver that keeps up was closed")

        slow = Connection("gw1", "slow", {"sub": "slow"}, 0, send_never, close_slow, False)
        other = Connection("gw1", "other", {"sub": "other"}, 0, send, close_other, False)
        for conn in (slow, other):
            hub.add(conn)
            conn.accepted.set()
        sizes = []
        for i in range(6):
            entry = LogEntry(i + 1, "gw1", delta("INSERT", f"r{i}", "writer", v="x" * 200))
            hub.publish("gw1", [entry], {}, EVERYTHING, None)
            for _ in range(3):
                await asyncio.sleep(0)
            sizes.append(slow.queued)
        frame = len(served[0])
        assert 250 < frame < 400
        # The first frame stalls in send; three more fit in 1,000 bytes; the next one drops it.
        assert sizes[:4] == [0, frame, 2 * frame, 3 * frame]
        assert closed == [4408] and hub.dropped == 1 and dropped_on == ["gw1"]
        assert hub.count == 1 and slow.outbox.empty() and slow.queued == 0
        assert len(served) == 6
        await hub.remove(slow)  # the socket handler's own removal is a no-op now
        await hub.remove(other)
        assert hub.count == 0

    asyncio.run(scenario())


def test_a_view_member_that_wrote_the_batch_gets_its_own_deltas() -> None:
    """Within a view, a member whose client wrote a row of the batch may hold it even where
    the view does not show it (its replica applied its own write): it alone hears of it (an
    eviction), its view-mates hear nothing, and the writing socket gets no echo."""

    async def scenario() -> None:
        hub = Hub(0)
        got: dict[str, list[bytes]] = {}

        def connect(name: str, sub: str) -> Connection:
            async def send(frame: bytes) -> None:
                got.setdefault(name, []).append(frame)

            async def close(code: int, reason: str) -> None:
                raise AssertionError(f"{name} closed: {code} {reason}")

            conn = Connection("gw1", sub, {"sub": sub, "team": "red"}, 0, send, close, False)
            hub.add(conn)
            conn.accepted.set()
            return conn

        origin = connect("w-pushing", "w")
        for name, sub in (("w-other-socket", "w"), ("x", "x")):
            connect(name, sub)
        moved = delta("INSERT", "r1", "w", hlc=100, team="blue")  # out of the red view
        history = {("todos", "r1"): (RowState(), [(1000, moved)])}  # as a push gives it
        hub.publish("gw1", *_stored(1000, moved), TEAMS, origin, SnapshotCache(), history)
        await until("the other socket's frame", lambda: "w-other-socket" in got)
        assert sorted(got) == ["w-other-socket"]
        frame = decode_server_frame(got["w-other-socket"][0])
        assert [(x.op, x.row_id, x.columns) for x in frame.deltas] == [("DELETE", "r1", ())]
        for conn in list(hub._by_gw["gw1"]):
            await hub.remove(conn)

    asyncio.run(scenario())


HUB_RULES = parse_rules(
    {
        "version": 1,
        "buckets": [
            {"name": "mine", "tables": ["todos"],
             "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
            {"name": "team", "tables": ["todos"],
             "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}]},
            {"name": "led", "tables": ["todos"],
             "filters": [{"column": "owner", "op": "neq", "value": "jwt:sub"},
                         {"column": "team", "op": "eq", "value": "jwt:lead"}]},
            {"name": "open", "tables": ["news"]},
        ],
    }
)
SUBS = ["alice", "bob", "carol"]
_receiver = st.tuples(
    st.fixed_dictionaries(
        {"sub": st.sampled_from(SUBS), "role": st.sampled_from(["client", "client", "admin"])},
        optional={"teams": st.sampled_from(["red", ["red", "blue"], "blue"]),
                  "lead": st.sampled_from(["red", "blue"])},
    ),
    st.booleans(),
    st.sampled_from([0, 0, 0, 4999, 6000]),  # view stamps: before, at or after the cursor
)
_write = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    st.sampled_from(["todos", "todos", "news"]),
    st.sampled_from(["r1", "r2"]),
    st.sampled_from(SUBS),
    st.sampled_from(SUBS),
    st.sampled_from([None, "red", "blue"]),
)


def _rows(writes: list[tuple[str, str, str, str, str, str | None]], start: int) -> list[RowDelta]:
    return [
        RowDelta.create(op, table, row, client,  # type: ignore[arg-type]
                        {} if op == "DELETE" else {"owner": owner, "team": team, "n": i},
                        start + i)
        for i, (op, table, row, client, owner, team) in enumerate(writes)
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_write, max_size=5),
    st.lists(_write, min_size=1, max_size=4),
    st.lists(_receiver, min_size=1, max_size=8),
    st.integers(0, 7),
)
def test_each_receiver_gets_exactly_its_page_view(
    before: list[tuple[str, str, str, str, str, str | None]],
    batch: list[tuple[str, str, str, str, str, str | None]],
    receivers: list[tuple[dict[str, Any], bool, int]],
    pusher: int,
) -> None:
    """Whatever the views, their indexes and who pushed, the hub queues each connection
    exactly what :func:`page_view` gives it for the batch (nothing when that is empty), and
    nothing to the connection that pushed: per-view fan-out changes no client's deltas."""
    old, new = _rows(before, 1000), _rows(batch, 2000)
    end, rules = 5000, RulesRecord(HUB_RULES, 10)
    states: dict[RowKey, RowState] = {}
    for x in old:
        apply_delta(states.setdefault((x.table, x.row_id), RowState()), x)
    history = {
        (x.table, x.row_id): (
            _copy(states.get((x.table, x.row_id), RowState())),
            [(end, y) for y in new if (y.table, y.row_id) == (x.table, x.row_id)],
        )
        for x in new
    }
    for x in new:
        apply_delta(states.setdefault((x.table, x.row_id), RowState()), x)
    rows = {k: RowRecord(s, end) for k, s in states.items()}

    async def scenario() -> None:
        hub = Hub(0)

        async def nothing(*_: object) -> None:
            return None

        conns = [
            Connection("gw1", str(c["sub"]), c, stamp, nothing, nothing, whole)
            for c, whole, stamp in receivers
        ]
        for conn in conns:
            hub.add(conn)  # never accepted: the frames stay queued for the test to read
        origin = conns[pusher % len(conns)]
        hub.publish("gw1", [LogEntry(end, "gw1", x) for x in new], rows, rules, origin,
                    SnapshotCache(), history)
        for conn in conns:
            queued = [conn.outbox.get_nowait() for _ in range(conn.outbox.qsize())]
            reader = Reader(conn.client_id, conn.claims,
                            effective_rules(HUB_RULES, conn.claims),
                            max(rules.stamp, conn.view_stamp), end - 1,
                            ViewHistory.fixed(HUB_RULES, conn.claims),
                            whole_rows=conn.whole_rows)
            want = page_view(new, rows, reader, False, None, history)
            if conn is origin or not want:
                assert queued == []
            else:
                assert len(queued) == 1
                assert decode_server_frame(queued[0]).deltas == want
        for conn in conns:
            await hub.remove(conn)

    asyncio.run(scenario())


def _copy(state: RowState) -> RowState:
    return RowState(dict(state.cells), state.write, state.tombstone)
