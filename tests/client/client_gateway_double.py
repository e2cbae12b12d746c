"""An in-process stand-in for a gateway, for unit tests of the client's sync logic.

It follows the SPEC rules that matter to a client (ingest-clock paging with ``hasMore``,
deltaId dedup, atomic push batches, broadcasts to the other connections) and lets a test
inject failures. End-to-end behaviour against the real gateway is in ``test_client_e2e.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from client.errors import LakeSyncError, SchemaError
from client.transport import Checkpoint, PullPage, PushResult, Transport
from client.transport._base import BroadcastHandler
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.merge import merge_state


@dataclass
class GatewayDouble:
    """Shared state of the stand-in gateway; ``connect()`` gives each client a transport."""

    log: list[tuple[int, RowDelta]] = field(default_factory=list)
    clock: HLC = field(default_factory=HLC)
    rejects: Callable[[RowDelta], bool] = lambda _d: False
    failures: list[LakeSyncError] = field(default_factory=list)
    checkpoint: tuple[int, list[list[RowDelta]]] | None = None
    pushes: list[list[str]] = field(default_factory=list)
    connections: list[DoubleTransport] = field(default_factory=list)

    def connect(self) -> DoubleTransport:
        t = DoubleTransport(self)
        self.connections.append(t)
        return t

    def state(self) -> dict[tuple[str, str], dict[str, object]]:
        return merge_state(d for _, d in self.log)

    def _fail(self) -> None:
        if self.failures:
            raise self.failures.pop(0)


class DoubleTransport(Transport):
    realtime = True

    def __init__(self, gw: GatewayDouble) -> None:
        self.gw = gw
        self.handler: BroadcastHandler | None = None

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        self.handler = handler

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        self.gw._fail()
        bad = [d for d in deltas if self.gw.rejects(d)]
        if bad:
            raise SchemaError(f"rejected {bad[0].delta_id}")
        known = {d.delta_id for _, d in self.gw.log}
        fresh = [d for d in deltas if d.delta_id not in known]
        self.gw.pushes.append([d.delta_id for d in deltas])
        for d in fresh:
            self.gw.log.append((self.gw.clock.now(), d))
        for other in self.gw.connections:
            if other is not self and other.handler is not None and fresh:
                other.handler(fresh)
        return PushResult(self.gw.clock.now(), len(deltas))

    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        self.gw._fail()
        after = [(h, d) for h, d in self.gw.log if h > since]
        page = after[:limit]
        server_hlc = page[-1][0] if page else max(since, self.gw.clock.last)
        return PullPage([d for _, d in page], server_hlc, len(after) > limit)

    def checkpoint(self) -> Checkpoint | None:
        if self.gw.checkpoint is None:
            return None
        server_hlc, pages = self.gw.checkpoint
        it: Iterator[list[RowDelta]] = iter(pages)
        return Checkpoint(server_hlc, it)

    def close(self) -> None:
        pass
