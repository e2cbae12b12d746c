"""The WebSocket fan-out (:mod:`lakesync.api.services.hub`), with connections whose ``send`` the
test controls: a receiver that stops taking frames is closed with 4408 once its outbox is full,
and the others are served on."""

from __future__ import annotations

import asyncio

from lakesync.api.services.hub import Connection, Hub
from lakesync.api.store.base import LogEntry, RulesRecord
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
