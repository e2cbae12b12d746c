"""``lakesync up``: serve the gateway with uvicorn (graceful shutdown finishes in-flight pushes).

SIGTERM (what systemd, Kubernetes and ``kill`` send) stops it like a clean return: the server
drains, then the lake jobs stop (the warm worker process with them), the store closes, the data
dir's ``gateway.json`` and lock are released, and the process exits 0. So does a SIGTERM that
comes while the gateway is still starting (the start completes, then it stops without serving)
and one more during that shutdown (it is already under way: logged, not fatal).

Exposed as the plain typer-compatible function :func:`up`, listed in ``lakesync/cli/main.py``'s
``LAZY_COMMANDS`` (loaded when ``lakesync up`` runs); ``python -m lakesync.api`` runs it too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer
import uvicorn

from lakesync.api.app import create_app
from lakesync.api.datadir import GatewayAddress, advertise, hold_data_dir
from lakesync.api.lake import lake_jobs
from lakesync.api.logs import configure_logging
from lakesync.api.services.declared import apply_declared
from lakesync.api.settings import GatewaySettings
from lakesync.config import Config, load_config
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.errors import ConfigError
from lakesync.hlc import HLC
from lakesync.hotlog.sharded import open_hot_log
from lakesync.lakehouse.runtime import WorkerJobs
from lakesync.lakehouse.settings import LakeSettings
from lakesync.tokens import weak_secret

if TYPE_CHECKING:
    from litestar import Litestar

__all__ = ["up"]

_log = logging.getLogger(__name__)


class _StopLatch:
    """``up``'s SIGTERM handler outside uvicorn's own (which serves in between): before serving
    it remembers the request (the start goes on, then :func:`_serve` stops at once); after it,
    the shutdown is already under way and a second request is logged, not fatal."""

    def __init__(self) -> None:
        self.asked = False
        self.stopping = False

    def __call__(self, sig: int, frame: FrameType | None) -> None:
        if self.stopping:
            _log.info("SIGTERM: the gateway is already stopping")
            return
        self.asked = True


@contextlib.contextmanager
def _sigterm_latch() -> Iterator[_StopLatch]:
    """Handle SIGTERM with a :class:`_StopLatch` for the block (the main thread only, where
    signals are delivered), then give the previous handler back."""
    latch = _StopLatch()
    if threading.current_thread() is not threading.main_thread():
        yield latch
        return
    previous = signal.signal(signal.SIGTERM, latch)
    try:
        yield latch
    finally:
        signal.signal(signal.SIGTERM, previous)


def up(
    host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (hot log, lake).")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Path of lakesync.yaml.")] = None,
) -> None:
    """Serve the sync gateway (HTTP + WebSocket) until SIGINT/SIGTERM."""
    cfg = load_config(config)
    if not cfg.jwt_secrets:
        # Without one the gateway could only answer AUTH_ERROR to every request.
        raise ConfigError(
            "no JWT secret: set LAKESYNC_JWT_SECRET (lakesync init writes one in .env: "
            "`set -a; . ./.env; set +a`; or make one with python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))')"
        )
    if data_dir is not None:
        cfg = msgspec.structs.replace(cfg, data_dir=data_dir)
    settings = GatewaySettings.from_config(cfg)
    lake = LakeSettings.from_config(cfg)
    known = settings.known_secrets(os.environ, lambda p: Path(p).read_text(encoding="utf-8"))
    configure_logging(secrets=[*known, *lake.secrets], identifiers=lake.identifiers)
    for weak in filter(None, map(weak_secret, cfg.jwt_secrets)):
        _log.warning("%s", weak)
    with _sigterm_latch() as latch, contextlib.ExitStack() as stack:
        serving = False

        def stopped() -> None:
            if serving:  # a start that failed says why in its one error line, nothing more
                _log.info("gateway stopped (lake jobs ended, store closed)")

        # Registered first, so it runs last: once the lake jobs, the store and the lock are done.
        stack.callback(stopped)
        urls = [settings.store_url, *(s.store_url for s in settings.shards)]
        if not all(u.startswith(("postgresql://", "postgres://")) for u in urls):
            # An embedded store serves one process: refuse a second one on this data dir.
            stack.enter_context(hold_data_dir(settings.data_dir))
        store = open_hot_log(
            settings.store_url,
            settings.shards,
            settings.data_dir,
            HLC(),
            settings.pg_schema,
            settings.store,
        )
        stack.enter_context(contextlib.closing(store))
        apply_declared(store, settings.gateways, settings.connectors)  # a mistake: exit 2
        shipping = DestinationMetrics()  # the scheduled runs' counts, on /metrics
        asked = WorkerJobs()  # the runs `lakesync pipeline run` & co. hand to the worker
        flusher = stack.enter_context(lake_jobs(settings, store, cfg, shipping, asked))
        worker_jobs = None if flusher is None else asked  # no pipeline extra: no worker
        app = create_app(settings, store=store, flusher=flusher, shipping=shipping,
                         declared_applied=True, worker_jobs=worker_jobs)

        def advertised(url: str) -> AbstractContextManager[object]:
            # The data dir's commands hand their runs to this process's worker (gateway.json).
            config_file = None if cfg.source is None else str(cfg.source.resolve())
            return advertise(settings.data_dir, GatewayAddress(url, os.getpid(), config_file))

        serving = True
        try:
            _serve(app, settings, cfg, host, port, advertised if worker_jobs is not None else None,
                   stop_asked=lambda: latch.asked)
        finally:
            latch.stopping = True  # the lake jobs stop and the store closes next


def _serve(
    app: Litestar,
    settings: GatewaySettings,
    cfg: Config,
    host: str | None,
    port: int | None,
    advertised: Callable[[str], AbstractContextManager[object]] | None = None,
    stop_asked: Callable[[], bool] = lambda: False,
) -> None:
    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # /ready turns 503 and new pushes are refused while in-flight ones finish.
            service = getattr(app.state, "service", None)
            if service is not None:
                service.draining = True
            if sig == signal.SIGTERM:
                # A stop request (systemd, Kubernetes, kill): end like a clean return. Not handed
                # to uvicorn, which would re-raise it once run() returns, and its default action
                # would kill the process before `up` stops the lake jobs and closes the store.
                self.should_exit = True
                return
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if stop_asked():  # a SIGTERM came before uvicorn's handlers took over
                self.should_exit = True
            if self.started and advertised is not None:
                url = _loopback_url(self.servers[0].sockets[0].getsockname())
                advertising.enter_context(advertised(url))

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # First: while in-flight requests finish, the data dir's commands stop handing
            # runs to this process's worker.
            advertising.close()
            await super().shutdown(sockets)

    advertising = contextlib.ExitStack()  # the data dir's gateway.json while serving

    server = _Server(
        uvicorn.Config(
            app,
            host=host or cfg.server.host,
            port=port or cfg.server.port,
            timeout_graceful_shutdown=30,
            log_config=None,
            access_log=False,
            ws_max_size=2 * settings.max_body_bytes,
            ws_ping_interval=cfg.server.ws_ping_interval or None,
            ws_ping_timeout=cfg.server.ws_ping_interval or None,
        )
    )
    if stop_asked():
        _log.info("SIGTERM while starting: stopping without serving")
        return
    server.run()


def _loopback_url(sockname: tuple[str, int] | tuple[str, int, int, int]) -> str:
    """The URL a local client reaches a server bound to ``sockname`` at (a loopback address
    for a server on every interface)."""
    host, port = sockname[0], sockname[1]
    address = ipaddress.ip_address(host)
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"http://{address if address.version == 4 else f'[{address}]'}:{port}"
