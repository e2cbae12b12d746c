"""The ``lakesync`` command-line tool."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from api.cli import up
from lakesync.config import load_config
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.lake.cli import DataDirOption, pipeline_app, query_command
from lakesync.tokens import mint_token, parse_ttl

__all__ = ["app", "main", "run"]

app = typer.Typer(
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
    typer.echo(mint_token(config.jwt_secrets[0], sub, gw, role, claims, parse_ttl(ttl)))


app.command("up")(up)
app.add_typer(pipeline_app, name="pipeline")
app.command("query")(query_command)


@app.command()
def demo(data_dir: DataDirOption = None) -> None:
    """Run the main job end to end: gateway, two clients, landing, dbt on Spark, DuckDB query."""
    from lakesync.demo import run_demo

    run_demo(data_dir or load_config().data_dir)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI; LakeSync errors become a one-line message and exit code 2."""
    try:
        app(args=argv, prog_name="lakesync")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except LakeSyncError as exc:
        typer.secho(f"error: {exc.message}", err=True, fg=typer.colors.RED)
        return 2
    except ModuleNotFoundError as exc:
        typer.secho(
            f"error: this command needs the optional module {exc.name!r}; "
            "install the matching extra, e.g. pip install 'lakesync[all]'",
            err=True,
            fg=typer.colors.RED,
        )
        return 2
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
