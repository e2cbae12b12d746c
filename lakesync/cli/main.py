"""The ``lakesync`` command-line tool."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import tempfile
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from lakesync import telemetry
from lakesync.cli.init import init_command
from lakesync.cli.output import log_redacted, printable, redacted
from lakesync.config import load_config
from lakesync.errors import ConfigError, LakeSyncError, ValidationError, without_traces
from lakesync.tokens import mint_client_token, weak_secret

if TYPE_CHECKING:
    from typer._click import Context  # typer vendors click; its commands take this Context

__all__ = [
    "LAZY_COMMANDS", "app", "expected_failure", "fully_loaded", "load_command", "main", "run"
]

LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "up": ("lakesync.api.cli", "up",
           "Serve the sync gateway (HTTP + WebSocket) until SIGINT/SIGTERM."),
    "query": ("lakesync.cli.query", "query_command",
              "Run SQL over the lake's Iceberg tables with DuckDB (no Spark), e.g. "
              "analytics.todos."),
    "materialise": ("lakesync.cli.materialise", "materialise_command",
                    "Ship each destination's changes since its watermark (no dbt run: see "
                    "pipeline run), then move rows whose last change is older than a "
                    "destination's hot_window out of it (the lake keeps them)."),
    "migrate": ("lakesync.cli.materialise", "migrate_command",
                "Copy tables between two declared destinations (idempotent: run it again to "
                "finish)."),
    "compact": ("lakesync.cli.compact", "compact_command",
                "Compact small data files, rewrite manifests, expire snapshots older than "
                "lake.snapshot_retention and remove orphan files, for the landing table and "
                "every model."),
    "connectors": ("lakesync.cli.connectors", "connectors_command",
                   "List a gateway's connectors (declared and registered) with their last "
                   "poll, cursor and last error."),
    "status": ("lakesync.cli.status", "status_command",
               "Show whether data is flowing: hot log, landing, pipeline, destinations, "
               "connectors and clients of a running gateway; exit 1 when something is failing, "
               "naming it."),
    "demo": ("lakesync.cli.demo", "demo_command",
             "Run the main job end to end: gateway, two clients, landing, dbt on Spark, DuckDB "
             "query."),
    "pipeline": ("lakesync.cli.lake", "pipeline_app",
                 "Lakehouse pipeline: landing → dbt on Spark → analytics.<table>."),
    "sql-server": ("lakesync.cli.sql_server", "sql_server_command",
                   "Serve the lake to BI tools, beeline and dbt over HiveServer2, read-only, to "
                   "clients that sign in with a token (Spark's Thrift server behind a checking "
                   "front door)."),
    "schema": ("lakesync.cli.schema", "schema_app",
               "Table schemas: migrate a column registered before typed columns existed."),
}
"""The commands whose modules load heavy optional packages (the gateway's Litestar, the lake's
sqlglot and pyiceberg, the client's websockets), as ``name: (module, attribute, summary)``: the
root group imports a command's module when that command runs (click's lazily loaded
subcommands), so ``lakesync --help`` and ``lakesync token`` start in a fraction of the time. The
attribute is a typer command function or a :class:`typer.Typer` group; the summary (the start of
its help, tests/cli/test_main.py checks) is what ``lakesync --help`` lists."""



_SPOT = re.compile(r"^(LINE \d+: )(.*)\n( *)\^", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _keyword_hint(message: str, duckdb: Any) -> str:
    """DuckDB's error ``message``, with a first line saying so when the syntax error is at (or
    just after) a word DuckDB's SQL keeps for itself (``at``, ``order``...) used as a name."""
    spot = _SPOT.search(message)
    if not message.startswith("Parser Error") or spot is None:
        return message
    line, column = spot.group(2), len(spot.group(3)) - len(spot.group(1))
    before = _WORD.findall(line[:column])[-1:]
    at = _WORD.match(line, max(column, 0))
    keywords = {k for (k,) in duckdb.sql(
        "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category <> 'unreserved'"
    ).fetchall()}
    for word in [*before, *([at.group(0)] if at else [])]:
        if word.lower() in keywords - {"from", "where", "select", "as", "and", "or", "on"}:
            return (f'{word!r} is an SQL keyword: as a column or table name, quote it ("{word}")\n'
                    f"{message}")
    return message


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
        return _keyword_hint(str(exc), duckdb), 1  # DuckDB's text names the spot
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


_LOADED: dict[str, Any] = {}
"""The lazy commands loaded so far (this process runs one root group)."""


def _summarised(command: Any) -> Any:
    """``command`` (and its sub-commands) with a one-line summary for command lists: typer's
    rich help keeps a docstring's line breaks there, cutting sentences mid-line."""
    if getattr(command, "short_help", None) is None and command.help:
        first = inspect.cleandoc(command.help).split("\n\n")[0]
        command.short_help = " ".join(first.split())
    for sub in getattr(command, "commands", {}).values():
        _summarised(sub)
    return command


def load_command(name: str) -> Any:
    """The click command of :data:`LAZY_COMMANDS` ``name``, its module imported (once)."""
    if name in _LOADED:
        return _LOADED[name]
    module, attribute, _ = LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: Any = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _LOADED[name] = _summarised(command)
    return command


def fully_loaded() -> Any:
    """The root click command with every lazy command loaded: what the CLI reference documents
    (``docs/_hooks``), options and sub-commands included."""
    for name in LAZY_COMMANDS:
        load_command(name)
    return typer.main.get_command(app)


class _ErrorBoundary(TyperGroup):
    """The root command group: every command runs inside its ``invoke``, so an expected failure
    of any of them becomes one red line on stderr and a non-zero exit instead of a traceback.
    It lists :data:`LAZY_COMMANDS` by their summaries and loads one only to run it."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *LAZY_COMMANDS]

    def get_command(self, ctx: Context, cmd_name: str) -> Any:
        if cmd_name not in LAZY_COMMANDS:
            found = super().get_command(ctx, cmd_name)
            return found if found is None else _summarised(found)
        loaded = _LOADED.get(cmd_name)
        # Listing the commands (--help) needs only the summary: no import.
        return loaded or TyperCommand(cmd_name, help=LAZY_COMMANDS[cmd_name][2])

    def resolve_command(self, ctx: Context, args: list[str]) -> Any:
        name = args[0] if args else None
        if name in LAZY_COMMANDS:
            load_command(name)
        return super().resolve_command(ctx, args)

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
            shown = without_traces(message)
            one_line = redacted(" ".join(shown.split()))  # a driver's error may quote a DSN
            if shown != message.strip():  # a Java or Python stack trace: kept, not shown
                one_line += f" (the whole error: {_keep_whole(redacted(message))})"
            typer.secho(f"error: {printable(one_line)}", err=True, fg=typer.colors.RED)
            raise typer.Exit(code) from None


def _keep_whole(text: str) -> str:
    """Write an error's whole (redacted) text, stack traces and all, to a file of its own in
    the temporary directory; its path."""
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", prefix="lakesync-error-", suffix=".log", delete=False
    ) as out:
        out.write(text + "\n")
    return out.name


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
    telemetry.configure()  # OTLP export when the standard OTEL_* variables ask for it


ADMIN_SUBJECT = "operator"
"""The subject of an admin token minted without ``--sub``."""


@app.command()
def token(
    gw: Annotated[str, typer.Option(help="Gateway id the token is valid for.")],
    sub: Annotated[str | None, typer.Option(
        help=f"Client id (the token's subject); needed but for an admin token (default "
        f"{ADMIN_SUBJECT!r})."
    )] = None,
    role: Annotated[str, typer.Option(
        help="client (syncs), admin (admin API and console too) or analyst (reads the lake "
        "through lakesync sql-server, nothing else)."
    )] = "client",
    claim: Annotated[
        list[str] | None,
        typer.Option(help="Extra claim for sync rules, k=v; repeat a key for an array."),
    ] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime, e.g. 30m, 1h, 7d.")] = "1h",
) -> None:
    """Mint a JWT signed with LAKESYNC_JWT_SECRET and print it."""
    if sub is None:
        if role != "admin":
            raise typer.BadParameter(
                f"a {role} token needs a subject: pass --sub CLIENT_ID", param_hint="--sub"
            )
        sub = ADMIN_SUBJECT
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
    weak = weak_secret(config.jwt_secrets[0])
    if weak is not None:
        typer.echo(f"warning: {weak}", err=True)
    typer.echo(mint_client_token(config.jwt_secrets[0], sub, gw, claims, ttl, role=role))


app.command("init")(init_command)  # light: loaded with the root group


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: the process's arguments) and return its exit code."""
    log_redacted()
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
