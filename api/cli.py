"""``lakesync up``: serve the gateway with uvicorn (graceful shutdown finishes in-flight pushes).

Exposed as the plain typer-compatible function :func:`up`; ``lakesync/cli.py`` registers it with
``app.command("up")(up)`` and ``python -m api`` runs it standalone.
"""

from __future__ import annotations

from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

__all__ = ["up"]


def up(
    host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (hot log, lake).")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Path of lakesync.yaml.")] = None,
) -> None:
    """Serve the sync gateway (HTTP + WebSocket) until SIGINT/SIGTERM."""
    import msgspec
    import uvicorn

    from api.app import create_app
    from api.logs import configure_logging
    from api.settings import GatewaySettings
    from lakesync.config import load_config

    cfg = load_config(config)
    if data_dir is not None:
        cfg = msgspec.structs.replace(cfg, data_dir=data_dir)
    settings = GatewaySettings.from_config(cfg)
    configure_logging()
    app = create_app(settings)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # /ready turns 503 and new pushes are refused while in-flight ones finish.
            service = getattr(app.state, "service", None)
            if service is not None:
                service.draining = True
            super().handle_exit(sig, frame)

    server = _Server(
        uvicorn.Config(
            app,
            host=host or cfg.server.host,
            port=port or cfg.server.port,
            timeout_graceful_shutdown=30,
            log_config=None,
            access_log=False,
            ws_max_size=2 * settings.max_body_bytes,
        )
    )
    server.run()
