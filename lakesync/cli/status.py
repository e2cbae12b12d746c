"""``lakesync status``: whether data is flowing, from a running gateway's ``/v1/admin/status``.

Tables in a terminal (whole when piped), ``--json`` for scripts, ``--watch`` to refresh in
place (one line per refresh when piped; its admin token renewed before it expires). Exits 1
when something is failing (a destination that cannot be read or whose last shipment failed, a
failing connector, a failed last pipeline run), naming each on stderr, so cron jobs and CI
checks can run it as is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
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

from lakesync.cli.connectors import (
    AdminTokenOption,
    GatewayUrlOption,
    admin_get,
    admin_tokens,
)
from lakesync.cli.materialise import ConfigOption
from lakesync.cli.output import plain, print_table, printable
from lakesync.errors import ValidationError
from lakesync.status import Backlog, GatewayStatus, StatusResponse

__all__ = ["fetch_status", "status_command", "status_line", "status_tables", "watch_status"]

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


def _run(g: GatewayStatus, now: datetime) -> Text:
    run = g.pipeline.runs[0] if g.pipeline.runs else None
    if run is None:
        return Text("none")
    text = Text("ok" if run.ok else "failed", style="" if run.ok else "red")
    return text + f" {_ago(run.started_at, now)}, {run.elapsed_s:.1f} s, {run.rows_merged} merged"


def _gateway_facts(g: GatewayStatus, now: datetime) -> list[tuple[str, str | Text]]:
    """What the status says of one gateway, as (heading, value) pairs."""
    return [
        ("hot log", f"{g.hot_log.entries}{'+' if g.hot_log.entries_capped else ''} entries, "
                    f"{g.hot_log.unflushed_bytes} bytes unflushed"),
        ("landing lag", _lag(g.landing.lag)),
        ("last flush", _ago(g.landing.last_flush_at, now)),
        ("last pipeline run", _run(g, now)),
        ("freshness", _age(g.pipeline.freshness_s)),
        ("pipeline lag", _lag(g.pipeline.lag)),
        ("clients", f"{sum(c.connections for c in g.clients)} connected, {len(g.clients)} seen"),
    ]


def _table(title: str, *headings: str) -> Table:
    """A table whose headings are never cut: a narrow terminal wraps the values instead."""
    table = Table(title=title)
    for heading in headings:
        table.add_column(plain(heading), min_width=len(heading), overflow="fold")
    return table


def status_tables(status: StatusResponse) -> list[Table]:
    """The status as tables: gateways (one column each, so the table fits 80 columns),
    destinations, connectors, clients (those with rows)."""
    now = status.generated_at
    gateways = _table(f"gateways at {now:%Y-%m-%d %H:%M:%SZ}", "gateway",
                      *(g.gateway for g in status.gateways))
    facts = [_gateway_facts(g, now) for g in status.gateways]
    for i, (heading, _) in enumerate(facts[0] if facts else []):
        gateways.add_row(heading, *(f[i][1] for f in facts))
    destinations = _table("destinations", "gateway", "destination", "kind", "lag",
                          "last shipment", "error")
    connectors = _table("connectors", "gateway", "connector", "state", "last poll",
                        "rows read", "last error")
    clients = _table("clients", "gateway", "client", "sockets", "last seen", "outbox",
                     "dead letters")
    for g in status.gateways:
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


def _refusals(status: StatusResponse) -> str:
    r = status.refusals
    return (
        f"refused since the gateway started: {r.validation} bad input, "
        f"{r.write_access} write access, {r.contract} contract"
    )


def _verdict(status: StatusResponse) -> Text:
    if not status.failing:
        return Text("all well: nothing is failing", style="green")
    return plain("\n".join(f"failing: {line}" for line in status.failing), style="red")


def status_line(status: StatusResponse) -> str:
    """The status in one line (what ``--watch`` prints per refresh when piped): the time,
    each gateway's facts, the refusals and the verdict."""
    now = status.generated_at
    parts = [
        f"{printable(g.gateway)}: "
        + ", ".join(f"{heading} {printable(value)}" for heading, value in _gateway_facts(g, now))
        for g in status.gateways
    ]
    parts.append(_refusals(status))
    failing = "; ".join(printable(line) for line in status.failing)
    parts.append(f"failing: {failing}" if failing else "all well")
    return f"{now:%Y-%m-%dT%H:%M:%SZ} " + " | ".join(parts)


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
    url, tokens = admin_tokens(Path(config) if config else None, gw or _ANY_GATEWAY, url, token)
    if watch:
        status = watch_status(lambda: fetch_status(url, tokens(), gw), url, interval, Console())
    else:
        status = fetch_status(url, tokens(), gw)
        if as_json:
            sys.stdout.write(msgspec.json.encode(status).decode() + "\n")
        else:
            for table in status_tables(status):
                print_table(table)
            console = Console()
            console.print(plain(_refusals(status)))
            if not status.failing:
                console.print(_verdict(status))
    if status is not None and status.failing:
        err = Console(stderr=True)
        for line in status.failing:
            err.print(plain(f"failing: {line}", style="red"), soft_wrap=True)
        raise typer.Exit(1)


def watch_status(
    fetch: Callable[[], StatusResponse],
    url: str,
    interval: float,
    console: Console,
    sleep: Callable[[float], None] = time.sleep,
) -> StatusResponse | None:
    """Show ``fetch()`` every ``interval`` seconds until Ctrl-C: the tables refreshed in place
    in a terminal, one line per refresh (:func:`status_line`) anywhere else. The last status
    read (None if none could be). A gateway that stops answering is shown, not fatal."""
    status: StatusResponse | None = None

    def read() -> str | None:
        """The error line when the gateway cannot be reached, else None (``status`` is new)."""
        nonlocal status
        try:
            status = fetch()
        except httpx.TransportError as exc:
            return f"cannot reach the gateway at {url} ({exc}); retrying"
        return None

    def view() -> RenderableType:
        error = read()
        if error is not None or status is None:
            return plain(error, style="red")
        return Group(*status_tables(status), plain(_refusals(status)), _verdict(status))

    def line() -> None:
        error = read()
        console.print(plain(error if error is not None or status is None else status_line(status)),
                      soft_wrap=True, highlight=False)
        console.file.flush()

    try:
        if not console.is_terminal:
            while True:
                line()
                sleep(interval)
        with Live(view(), console=console, auto_refresh=False, screen=False) as live:
            while True:
                sleep(interval)
                live.update(view(), refresh=True)
    except KeyboardInterrupt:
        pass
    return status
