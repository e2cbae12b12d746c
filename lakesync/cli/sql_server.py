"""``lakesync sql-server``: serve the lake to BI tools, beeline, PyHive and dbt over HiveServer2.

Listed in ``lakesync.cli.main.LAZY_COMMANDS`` (loaded when it runs). The server and its
settings: :mod:`lakesync.lakehouse.sql_server`.
"""

from __future__ import annotations

import signal
from typing import Annotated

import typer
from rich.console import Console

from lakesync.api.logs import configure_logging
from lakesync.cli.lake import DataDirOption
from lakesync.cli.materialise import ConfigOption
from lakesync.config import load_config
from lakesync.errors import ConfigError
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.sql_server import (
    DEFAULT_GATEWAY,
    SqlServer,
    analyst_authenticator,
    check_bind_address,
)

__all__ = ["sql_server_command"]


def sql_server_command(
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback unless --allow-remote).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (HiveServer2's default).")] = 10000,
    allow_remote: Annotated[
        bool,
        typer.Option("--allow-remote", help="Allow a non-loopback --host."),
    ] = False,
    gw: Annotated[
        str,
        typer.Option(
            "--gw",
            help="Gateway id the analysts' tokens name (lakesync token --gw GW --role analyst).",
        ),
    ] = DEFAULT_GATEWAY,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Let any client in without a token (loopback only; statements are still "
            "checked).",
        ),
    ] = False,
    hiveconf: Annotated[
        list[str] | None,
        typer.Option(
            help="Extra Hive tuning setting KEY=VALUE for the Thrift server, e.g. "
            "hive.server2.idle.session.timeout=1h; repeatable.",
        ),
    ] = None,
) -> None:
    """Serve the lake to BI tools, beeline and dbt over HiveServer2, read-only, to clients
    that sign in with a token (Spark's Thrift server behind a checking front door).

    Runs until interrupted: clients connect to jdbc:hive2://HOST:PORT/default with any user
    name and a token from `lakesync token --role analyst` as the password, and query
    analytics.<table> (docs/guides/analyst.md lists connection strings)."""

    check_bind_address(host, allow_remote, authenticated=not no_auth)
    loaded = load_config(config)
    settings = LakeSettings.from_config(loaded, data_dir)
    if not no_auth and not loaded.jwt_secrets:
        raise ConfigError(
            "LAKESYNC_JWT_SECRET is not set: the SQL endpoint checks analysts' tokens with "
            "the gateway's secret; export it (or pass --no-auth to serve loopback without "
            "authentication)"
        )
    configure_logging(secrets=loaded.jwt_secrets)
    authenticate = None if no_auth else analyst_authenticator(loaded.jwt_secrets, gw)
    server = SqlServer(settings, host, port, hiveconf or (), authenticate=authenticate)
    err = Console(stderr=True, highlight=False)
    # SIGTERM (a service manager's stop) ends the server like Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with err.status(f"starting Spark's Thrift server on {host}:{port} (log {server.log_path})"):
            server.start()
        typer.echo(f"serving the lake at {server.url} (Ctrl-C stops it)", err=True)
        code = server.wait()
        if code != 0:
            typer.secho(
                f"error: the Thrift server exited with code {code}; see {server.log_path}",
                err=True, fg=typer.colors.RED,
            )
            raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("stopping the Thrift server", err=True)
    finally:
        server.stop()
