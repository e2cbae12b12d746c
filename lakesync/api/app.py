"""The gateway's Litestar application factory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio.to_thread
from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin

from lakesync import telemetry
from lakesync.api.actions import ActionDispatcher
from lakesync.api.auth import provide_service
from lakesync.api.controllers.actions import ActionController
from lakesync.api.controllers.admin import AdminController
from lakesync.api.controllers.console import ConsoleController
from lakesync.api.controllers.health import health, metrics, ready
from lakesync.api.controllers.legacy import legacy_redirect
from lakesync.api.controllers.sync import SyncController
from lakesync.api.controllers.ws import sync_socket
from lakesync.api.cors import OriginPolicy, cors_middleware
from lakesync.api.errors import exception_handlers
from lakesync.api.headers import security_headers_middleware
from lakesync.api.lake import Lead
from lakesync.api.logs import request_id_middleware
from lakesync.api.metrics import GatewayMetrics
from lakesync.api.services.connectors import ConnectorMetrics, ConnectorService
from lakesync.api.services.console import ConsoleService
from lakesync.api.services.declared import apply_declared
from lakesync.api.services.hub import Hub
from lakesync.api.services.status import StatusService
from lakesync.api.services.sync import SyncService
from lakesync.api.settings import GatewaySettings
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog, LogNotice
from lakesync.hotlog.sharded import open_hot_log

if TYPE_CHECKING:
    from lakesync.destinations.metrics import DestinationMetrics
    from lakesync.lakehouse.runtime import WorkerJobs

__all__ = ["create_app"]

Flusher = Callable[[str], Awaitable[None]]


def create_app(
    settings: GatewaySettings,
    store: HotLog | None = None,
    flusher: Flusher | None = None,
    shipping: DestinationMetrics | None = None,
    declared_applied: bool = False,
    worker_jobs: WorkerJobs | None = None,
) -> Litestar:
    """Build the gateway app. Without ``store`` it opens (and closes) the one the settings
    name; ``flusher(gw)``, if given, serves ``POST /v1/admin/flush/{gw}``; ``shipping`` (the
    scheduled pipeline's destination counters) is shown on ``/metrics``; the declared
    configuration is applied at start unless ``declared_applied`` (the caller did);
    ``worker_jobs``, if given, takes the runs ``POST /v1/admin/lake/run`` hands to the pipeline
    worker."""
    metrics_ = GatewayMetrics(by_gateway=settings.metrics_gateway_labels)
    if shipping is not None:
        metrics_.registry.register(shipping)
    telemetry.export_metrics(metrics_.registry)  # to OTLP too, when OTEL_* variables ask

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        owned = store is None
        hot = store
        if hot is None:
            hot = await anyio.to_thread.run_sync(
                open_hot_log,
                settings.store_url,
                settings.shards,
                settings.data_dir,
                HLC(),
                settings.pg_schema,
                settings.store,
            )
        hub = Hub(
            settings.ws_max_connections,
            settings.ws_max_connections_per_gateway,
            settings.ws_max_connections_per_client,
            settings.ws_send_queue_bytes,
            on_drop=lambda gw: metrics_.count(gw, "ws_dropped"),
        )
        if not declared_applied:
            # `lakesync up` applies and checks the declared config before serving (a refused
            # start is then one error line); an app built on its own applies it here.
            await anyio.to_thread.run_sync(
                apply_declared, hot, settings.gateways, settings.connectors
            )
        service = SyncService(hot, settings, metrics_, hub)
        app.state.service = service
        connectors = ConnectorService(
            service, hot, settings.connectors, lead=Lead(hot, "connectors", "connector polls")
        )
        app.state.connectors = connectors
        app.state.status = StatusService(service, hot, connectors)
        console = ConsoleService(service, hot, app.state.status, settings.console_sample_s)
        app.state.console = console
        connector_metrics = ConnectorMetrics(connectors, settings.metrics_gateway_labels)
        metrics_.registry.register(connector_metrics)
        app.state.actions = ActionDispatcher(hot, connectors.action_handlers)
        await connectors.start()
        loop = asyncio.get_running_loop()
        relays: set[asyncio.Task[None]] = set()

        def spawn(notice: LogNotice) -> None:
            task = loop.create_task(service.relay(notice))
            relays.add(task)
            task.add_done_callback(relays.discard)

        def on_notice(notice: LogNotice) -> None:
            loop.call_soon_threadsafe(spawn, notice)

        hot.listen(on_notice)
        sampler = loop.create_task(console.run())
        try:
            yield
        finally:
            sampler.cancel()
            await connectors.stop()
            metrics_.registry.unregister(connector_metrics)
            service.draining = True
            for task in list(relays):
                task.cancel()
            if owned:
                await anyio.to_thread.run_sync(hot.close)

    app = Litestar(
        route_handlers=[
            SyncController,
            ActionController,
            AdminController,
            ConsoleController,
            sync_socket,
            legacy_redirect,
            health,
            ready,
            metrics,
        ],
        dependencies={
            "service": Provide(provide_service, sync_to_thread=False),
            # The lake runtime's job queue, an explicit dependency of the routes that submit runs.
            "worker_jobs": Provide(lambda: worker_jobs, sync_to_thread=False, use_cache=True),
        },
        exception_handlers=exception_handlers,
        lifespan=[lifespan],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=(
            OpenAPIConfig(
                title="LakeSync gateway",
                version="1",
                path="/docs",
                render_plugins=[SwaggerRenderPlugin(path="/"), JsonRenderPlugin()],
            )
            if settings.docs
            else None
        ),
        debug=False,
        # Logging is configured by the process (lakesync.api.logs.configure_logging in `lakesync
        # up`): Litestar's default queue handler would drop the last lines when the process exits.
        logging_config=None,
    )
    # Outside the router, so unrouted requests (404/405) get a request id, a log line and the
    # security headers too, and CORS headers on the sync API's paths.
    origins = OriginPolicy(settings.cors_origins)
    app.asgi_handler = security_headers_middleware(
        request_id_middleware(cors_middleware(app.asgi_handler, origins))
    )
    app.state.origins = origins  # the WebSocket handshake checks the same policy
    app.state.metrics = metrics_
    app.state.flusher = flusher
    return app
