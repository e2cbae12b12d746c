"""``lakesync status``: whether data is flowing, from a running gateway's ``/v1/admin/status``.

Tables in a terminal (whole when piped), ``--json`` for scripts, ``--watch`` to refresh in
place. Exits 1 when something is failing (a destination that cannot be read or whose last
shipment failed, a failing connector, a failed last pipeline run), naming each on stderr, so
cron jobs and CI checks can run it as is.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import httpx
import msgspec
import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lakesync.cli.connectors import AdminTokenOption, GatewayUrlOption, admin_access, admin_get
from lakesync.cli.materialise import ConfigOption
from lakesync.cli.output import plain, print_table
from lakesync.errors import ValidationError
from lakesync.status import Backlog, StatusResponse

__all__ = ["fetch_status", "status_command", "status_tables"]

_ANY_GATEWAY = "lakesync"
"""The gateway a minted token names when every gateway is asked for (any id will do)."""


def fetch_status(url: str, token: str, gw: str | None) -> StatusResponse:
    """The status of ``gw`` (None: every gateway the gateway process knows)."""
    path = "/v1/admin/status?all=true" if gw is None else f"/v1/admin/status/{gw}"
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30) as http:
        body = admin_get(http, path)
    if body is None:
        raise ValidationError(
            f"the gateway at {url} knows no gateway {gw!r} (nothing is declared or stored for "
            "it); check --gw, and --url or the config's server.host and server.port"
        )
    return msgspec.convert(body, StatusResponse, strict=False)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ago(at: datetime | None, now: datetime) -> str:
    return "never" if at is None else f"{_age((now - at).total_seconds())} ago"


def _lag(b: Backlog) -> str:
    if not b.deltas:
        return "none"
    return f"{b.deltas}{'+' if b.capped else ''} deltas, oldest {_age(b.oldest_age_s)}"


def status_tables(status: StatusResponse) -> list[Table]:
    """The status as tables: gateways, destinations, connectors, clients (those with rows)."""
    now = status.generated_at
    gateways = Table(title=f"gateways at {now:%Y-%m-%d %H:%M:%SZ}")
    for heading in ("gateway", "hot log", "landing lag", "last flush", "last pipeline run",
                    "freshness", "pipeline lag", "clients"):
        gateways.add_column(heading)
    destinations = Table(title="destinations")
    for heading in ("gateway", "destination", "kind", "lag", "last shipment", "error"):
        destinations.add_column(heading)
    connectors = Table(title="connectors")
    for heading in ("gateway", "connector", "state", "last poll", "rows read", "last error"):
        connectors.add_column(heading)
    clients = Table(title="clients")
    for heading in ("gateway", "client", "sockets", "last seen", "outbox", "dead letters"):
        clients.add_column(heading)
    for g in status.gateways:
        run = g.pipeline.runs[0] if g.pipeline.runs else None
        gateways.add_row(
            plain(g.gateway),
            f"{g.hot_log.entries}{'+' if g.hot_log.entries_capped else ''} entries, "
            f"{g.hot_log.unflushed_bytes} bytes unflushed",
            _lag(g.landing.lag),
            _ago(g.landing.last_flush_at, now),
            "none" if run is None else
            f"{'ok' if run.ok else '[red]failed[/red]'} {_ago(run.started_at, now)}, "
            f"{run.elapsed_s:.1f} s, {run.rows_merged} merged",
            _age(g.pipeline.freshness_s),
            _lag(g.pipeline.lag),
            f"{sum(c.connections for c in g.clients)} connected, {len(g.clients)} seen",
        )
        for d in g.destinations:
            error = d.error or d.last_error
            destinations.add_row(
                plain(g.gateway), plain(d.name), plain(d.kind),
                _lag(d.lag) if d.error is None else "-", _ago(d.last_shipment_at, now),
                "-" if error is None else plain(error, style="red"),
            )
        for c in g.connectors:
            style = "red" if c.failing else ""
            connectors.add_row(
                plain(g.gateway), plain(c.name), plain(c.state), _ago(c.last_poll_at, now),
                str(c.rows_read), "-" if c.last_error is None else plain(c.last_error, style=style),
            )
        for cl in g.clients:
            clients.add_row(
                plain(g.gateway), plain(cl.client_id), str(cl.connections),
                _ago(cl.last_seen_at, now),
                "-" if cl.pending_outbox is None else str(cl.pending_outbox),
                "-" if cl.dead_letters is None else str(cl.dead_letters),
            )
    return [t for t in (gateways, destinations, connectors, clients) if t.row_count]


def _verdict(status: StatusResponse) -> Text:
    if not status.failing:
        return Text("all well: nothing is failing", style="green")
    return plain("\n".join(f"failing: {line}" for line in status.failing), style="red")


def status_command(
    gw: Annotated[
        str | None, typer.Option("--gw", help="One gateway (default: every one it knows).")
    ] = None,
    url: GatewayUrlOption = None,
    token: AdminTokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between refreshes with --watch.", min=0.2)
    ] = 2.0,
    config: ConfigOption = None,
) -> None:
    """Show whether data is flowing: hot log, landing, pipeline, destinations, connectors and
    clients of a running gateway; exit 1 when something is failing, naming it."""
    if watch and as_json:
        raise typer.BadParameter("--watch shows tables; drop --json", param_hint="--watch")
    url, token = admin_access(Path(config) if config else None, gw or _ANY_GATEWAY, url, token)
    if watch:
        status = _watch(url, token, gw, interval)
    else:
        status = fetch_status(url, token, gw)
        if as_json:
            sys.stdout.write(msgspec.json.encode(status).decode() + "\n")
        else:
            for table in status_tables(status):
                print_table(table)
            if not status.failing:
                Console().print(_verdict(status))
    if status is not None and status.failing:
        err = Console(stderr=True)
        for line in status.failing:
            err.print(plain(f"failing: {line}", style="red"), soft_wrap=True)
        raise typer.Exit(1)


def _watch(url: str, token: str, gw: str | None, interval: float) -> StatusResponse | None:
    """Refresh the tables in place every ``interval`` seconds until Ctrl-C; the last status
    read (None if none could be). A gateway that stops answering is shown, not fatal."""
    status: StatusResponse | None = None

    def view() -> RenderableType:
        nonlocal status
        try:
            status = fetch_status(url, token, gw)
        except httpx.TransportError as exc:
            return plain(f"cannot reach the gateway at {url} ({exc}); retrying", style="red")
        return Group(*status_tables(status), _verdict(status))

    try:
        with Live(view(), auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(view(), refresh=True)
    except KeyboardInterrupt:
        pass
    return status

