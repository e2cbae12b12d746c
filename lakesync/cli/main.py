"""The ``lakesync`` command-line tool."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from lakesync.api.cli import up
from lakesync.cli.compact import compact_command
from lakesync.cli.connectors import connectors_command
from lakesync.cli.init import init_command
from lakesync.cli.lake import DataDirOption, pipeline_app, query_command
from lakesync.cli.materialise import materialise_command, migrate_command
from lakesync.cli.schema import schema_app
from lakesync.cli.sql_server import sql_server_command
from lakesync.cli.status import status_command
from lakesync.config import load_config
from lakesync.errors import ConfigError, LakeSyncError, ValidationError
from lakesync.tokens import mint_client_token

if TYPE_CHECKING:
    from typer._click import Context  # typer vendors click; its commands take this Context

__all__ = ["app", "expected_failure", "main", "run"]


def expected_failure(exc: Exception) -> tuple[str, int] | None:
    """The one-line message and exit code for a failure the user can act on, else None (a bug).

    Bad input or configuration (:class:`ValidationError`, a missing optional module) exits 2 like
    a usage error; everything else the user can fix (no lake, a gateway that is not running, an
    unreadable path, a failed pipeline) exits 1. Libraries are looked up in ``sys.modules`` so
    that a command that never loaded them does not load them here.
    """
    if isinstance(exc, LakeSyncError):
        return exc.message, 2 if isinstance(exc, ValidationError) else 1
    if isinstance(exc, ModuleNotFoundError):
        return (
            f"this command needs the optional module {exc.name!r}; "
            "install the matching extra, e.g. pip install 'lakesync[all]'",
            2,
        )
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.TransportError):
        try:
            where = f" at {exc.request.url.copy_with(path='/', query=None)}"
        except RuntimeError:  # raised by .request when the error carries none
            where = ""
        return f"cannot reach the gateway{where} ({exc}); is it running (lakesync up)?", 1
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(exc, duckdb.Error):
        return str(exc), 1  # syntax errors, unknown columns: DuckDB's text names the spot
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.OperationalError):
        reason = _first_line(exc.orig or exc)
        return f"cannot open the lake's catalog ({reason}); check lake.catalog_uri", 1
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        return (
            f"cannot use the PostgreSQL hot-log store ({_first_line(exc)}); is the server "
            "running? check store_url (LAKESYNC_STORE_URL)",
            1,
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}; check that path and its permissions", 1
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of a driver's error message (the rest is hints and context)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class _ErrorBoundary(TyperGroup):
    """The root command group: every command runs inside its ``invoke``, so an expected failure
    of any of them becomes one red line on stderr and a non-zero exit instead of a traceback."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (TyperException, typer.Exit, typer.Abort):  # usage errors and exits: typer's own
            raise
        except Exception as exc:
            failure = expected_failure(exc)
            if failure is None:
                raise
            message, code = failure
            one_line = " ".join(message.split())
            typer.secho(f"error: {one_line}", err=True, fg=typer.colors.RED)
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=_ErrorBoundary,
    name="lakesync",
    help="LakeSync: declare what data goes where; the engine syncs it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """LakeSync: declare what data goes where; the engine syncs it."""


@app.command()
def token(
    sub: Annotated[str, typer.Option(help="Client id (the token's subject).")],
    gw: Annotated[str, typer.Option(help="Gateway id the token is valid for.")],
    role: Annotated[str, typer.Option(help="client or admin.")] = "client",
    claim: Annotated[
        list[str] | None,
        typer.Option(help="Extra claim for sync rules, k=v; repeat a key for an array."),
    ] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime, e.g. 30m, 1h, 7d.")] = "1h",
) -> None:
    """Mint a JWT signed with LAKESYNC_JWT_SECRET and print it."""
    claims: dict[str, str | list[str]] = {}
    for item in claim or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} must look like key=value", param_hint="--claim")
        prev = claims.get(key)
        if prev is None:
            claims[key] = value
        else:
            claims[key] = [*([prev] if isinstance(prev, str) else prev), value]
    config = load_config()
    if not config.jwt_secrets:
        raise ConfigError("LAKESYNC_JWT_SECRET is not set; export the gateway's secret first")
    typer.echo(mint_client_token(config.jwt_secrets[0], sub, gw, claims, ttl, role=role))


app.command("init")(init_command)
app.command("up")(up)
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(schema_app, name="schema")
app.command("query")(query_command)
app.command("materialise")(materialise_command)
app.command("migrate")(migrate_command)
app.command("compact")(compact_command)
app.command("connectors")(connectors_command)
app.command("status")(status_command)
app.command("sql-server")(sql_server_command)


@app.command()
def demo(data_dir: DataDirOption = None) -> None:
    """Run the main job end to end: gateway, two clients, landing, dbt on Spark, DuckDB query."""
    from lakesync.cli.demo import run_demo

    run_demo(data_dir or load_config().data_dir)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: the process's arguments) and return its exit code."""
    try:
        app(args=argv, prog_name="lakesync")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
