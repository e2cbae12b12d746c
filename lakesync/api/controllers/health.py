"""Unauthenticated probes: ``/health``, ``/ready`` and Prometheus ``/metrics``."""

from __future__ import annotations

import anyio
import anyio.to_thread
import msgspec
from litestar import MediaType, Response, get
from litestar.di import NamedDependency

from lakesync.api.errors import ERROR_RESPONSES
from lakesync.api.services.sync import SyncService
from lakesync.errors import BackpressureError

__all__ = ["health", "metrics", "ready"]


class Status(msgspec.Struct):
    """A probe answer."""

    status: str


@get("/health", tags=["ops"])
async def health() -> Status:
    """The process is up."""
    return Status("ok")


@get("/ready", tags=["ops"], responses={503: ERROR_RESPONSES[503]})
async def ready(service: NamedDependency[SyncService]) -> Status:
    """Ready to serve: not draining and the store answers (503 otherwise)."""
    if service.draining:
        raise BackpressureError("draining: the gateway is shutting down")
    try:
        with anyio.fail_after(3):
            await anyio.to_thread.run_sync(service.store.ping, abandon_on_cancel=True)
    except Exception as exc:
        raise BackpressureError(f"the hot-log store is unreachable: {exc}") from None
    return Status("ready")


@get("/metrics", tags=["ops"], media_type=MediaType.TEXT)
async def metrics(service: NamedDependency[SyncService]) -> Response[bytes]:
    """Prometheus text exposition."""
    m = service.metrics
    m.ws_connections.set(service.hub.count)
    m.hotlog_unflushed.set(await anyio.to_thread.run_sync(service.store.unflushed_bytes))
    m.hotlog_head.set(await anyio.to_thread.run_sync(service.store.head))
    return Response(m.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
