"""``lakesync sql-server``: serve the lake to BI tools, beeline, PyHive and dbt over HiveServer2.

Listed in ``lakesync.cli.main.LAZY_COMMANDS`` (loaded when it runs). The server and its
settings: :mod:`lakesync.lakehouse.sql_server`.
"""

from __future__ import annotations

import signal
from typing import Annotated

import typer
from rich.console import Console

from lakesync.cli.lake import DataDirOption
from lakesync.cli.materialise import ConfigOption
from lakesync.config import load_config
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.sql_server import SqlServer, check_bind_address

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
        typer.Option(
            "--allow-remote",
            help="Allow a non-loopback --host (the default authentication accepts any user).",
        ),
    ] = False,
    hiveconf: Annotated[
        list[str] | None,
        typer.Option(
            help="Extra Hive setting KEY=VALUE for the Thrift server, e.g. "
            "hive.server2.authentication=LDAP; repeatable."
        ),
    ] = None,
) -> None:
    """Serve the lake to BI tools, beeline and dbt over HiveServer2 (Spark's Thrift server).

    Runs until interrupted: clients connect to jdbc:hive2://HOST:PORT/default and query
    analytics.<table> (docs/guides/analyst.md lists connection strings)."""

    check_bind_address(host, allow_remote)
    settings = LakeSettings.from_config(load_config(config), data_dir)
    server = SqlServer(settings, host, port, hiveconf or ())
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
