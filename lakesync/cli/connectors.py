"""``lakesync connectors``: the connectors of a running gateway and how each is doing.

Reads the admin routes (``/v1/admin/connectors/{gw}`` and each connector's ``…/status``) with
an admin token: ``--token``, else one minted from ``LAKESYNC_JWT_SECRET`` as ``lakesync token``
does. A gateway that is not running or refuses the token, or an unknown ``--gw``, is one line
on stderr. ``--follow NAME`` follows one connector's first load: rows read so far
in a terminal, one summary line elsewhere (:class:`lakesync.progress.FirstLoad` counts).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from lakesync.cli.materialise import ConfigOption
from lakesync.cli.output import plain, print_table, printable
from lakesync.config import load_config
from lakesync.errors import AuthError, ConfigError, LakeSyncError, NotFoundError, ValidationError
from lakesync.progress import FirstLoad
from lakesync.tokens import mint_token

__all__ = [
    "ADMIN_TOKEN_TTL_S",
    "AdminTokenOption",
    "AdminTokens",
    "GatewayUrlOption",
    "admin_access",
    "admin_get",
    "admin_tokens",
    "connectors_command",
    "cursor_summary",
    "follow_first_load",
    "gateway_connectors",
]

_CLI_SUBJECT = "lakesync-cli"
_FOLLOW_EVERY_S = 0.25
"""How often ``--follow`` reads the connector's status."""


def cursor_summary(cursor: Any) -> str:
    """A stored cursor in one short line: marks as they are, id lists as their length."""

    def short(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: short(v) for k, v in value.items()}
        if isinstance(value, list) and len(value) > 3:
            return f"<{len(value)} ids>"
        return value

    return "-" if not cursor else json.dumps(short(cursor), separators=(",", ":"))


def _when(epoch: float | None) -> str:
    return "never" if epoch is None else f"{datetime.fromtimestamp(epoch, UTC):%Y-%m-%d %H:%M:%SZ}"


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.reason_phrase))
    except ValueError:
        return response.reason_phrase


def admin_get(http: httpx.Client, path: str) -> Any:
    """The JSON body of a 200, None for a 404; a refused token or any other status raises a
    :class:`LakeSyncError` saying what to do."""
    response = http.get(path)
    if response.status_code in (401, 403):
        raise AuthError(
            f"the gateway refused the token ({response.status_code}: {_error(response)}); pass "
            "an admin token of this gateway with --token, or set LAKESYNC_JWT_SECRET to its secret"
        )
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise LakeSyncError(
            f"the gateway answered {response.status_code} to GET {path}: {_error(response)}"
        )
    return response.json()


def gateway_connectors(url: str, gw: str, token: str) -> list[dict[str, Any]]:
    """Every connector of ``gw`` (credentials redacted) with ``status``: its status document,
    or None when it does not run in that gateway process. Raises :class:`ValidationError` when
    the gateway process knows no gateway ``gw``."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30) as http:
        listed = admin_get(http, f"/v1/admin/connectors/{gw}")
        if listed is None:
            raise ValidationError(
                f"the gateway at {url} knows no gateway {gw!r} (nothing is declared or stored "
                "for it); check --gw, and --url or the config's server.host and server.port"
            )
        return [
            {**doc, "status": admin_get(http, f"/v1/admin/connectors/{gw}/{doc['name']}/status")}
            for doc in listed["connectors"]
        ]


GatewayUrlOption = Annotated[
    str | None,
    typer.Option(help="Gateway URL (default: server.host and server.port of the config)."),
]
AdminTokenOption = Annotated[
    str | None,
    typer.Option(help="An admin token of the gateway (default: minted from LAKESYNC_JWT_SECRET)."),
]
"""The options of a command that talks to a running gateway's admin API (:func:`admin_access`)."""


ADMIN_TOKEN_TTL_S = 300
"""How long an admin token the CLI mints is valid."""


class AdminTokens:
    """The admin token for each request of a command: the one given (``--token``), or one
    minted from the JWT secret and minted again once half its lifetime has passed, so a command
    running longer than a token lives (``status --watch``) keeps being let in."""

    def __init__(
        self,
        gw: str,
        *,
        secret: str | None = None,
        token: str | None = None,
        ttl_s: int = ADMIN_TOKEN_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if token is None and not secret:
            raise ConfigError(
                "LAKESYNC_JWT_SECRET is not set; export the gateway's secret or pass --token"
            )
        self._gw, self._secret, self._given = gw, secret, token
        self._ttl_s, self._clock = ttl_s, clock
        self._token, self._minted = "", 0.0

    def __call__(self) -> str:
        """A token valid for at least half its lifetime from now (the given one as it is)."""
        if self._given is not None:
            return self._given
        now = self._clock()
        if not self._token or now >= self._minted + self._ttl_s / 2:
            assert self._secret is not None
            self._token = mint_token(
                self._secret, _CLI_SUBJECT, self._gw, "admin", ttl_s=self._ttl_s, now=now
            )
            self._minted = now
        return self._token


def admin_tokens(
    config: Path | None, gw: str, url: str | None, token: str | None
) -> tuple[str, AdminTokens]:
    """The gateway's URL (default: the config's ``server.host`` and ``server.port``) and the
    admin tokens for ``gw`` (default: minted from ``LAKESYNC_JWT_SECRET``, renewed before they
    expire)."""
    loaded = load_config(config)
    secret = loaded.jwt_secrets[0] if loaded.jwt_secrets else None
    tokens = AdminTokens(gw, secret=secret, token=token)
    return url or f"http://{loaded.server.host}:{loaded.server.port}", tokens


def admin_access(
    config: Path | None, gw: str, url: str | None, token: str | None
) -> tuple[str, str]:
    """The gateway's URL (default: the config's ``server.host`` and ``server.port``) and an
    admin token for ``gw`` (default: one minted from ``LAKESYNC_JWT_SECRET``, valid 5 min)."""
    url, tokens = admin_tokens(config, gw, url, token)
    return url, tokens()


def connectors_command(
    gw: Annotated[str, typer.Option("--gw", help="Gateway id.")],
    url: GatewayUrlOption = None,
    token: AdminTokenOption = None,
    config: ConfigOption = None,
    follow: Annotated[
        str | None,
        typer.Option(
            "--follow",
            metavar="NAME",
            help="Follow connector NAME's first load until it ends: rows read so far in a "
            "terminal, one summary line otherwise; exit 1 if it fails.",
        ),
    ] = None,
) -> None:
    """List a gateway's connectors (declared and registered) with their last poll, cursor and
    last error."""
    url, token = admin_access(Path(config) if config else None, gw, url, token)
    if follow is not None:
        console = Console(stderr=True)
        started = time.monotonic()
        with httpx.Client(base_url=url.rstrip("/"), timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            load = follow_first_load(_statuses(http, url, gw, follow), follow, console)
        summary = load.summary(time.monotonic() - started)
        if load.error is not None:
            raise LakeSyncError(summary)  # one error line, exit 1
        console.print(plain(summary), soft_wrap=True)
        return
    found = gateway_connectors(url, gw, token)
    if not found:
        Console(stderr=True).print(plain(f"gateway {gw} has no connectors"))
        return
    table = Table(title=plain(f"connectors of {gw}"))
    for heading in ("name", "kind", "state", "polls", "last poll", "cursor", "last error"):
        table.add_column(heading, overflow="fold")
    for c in found:
        s = c["status"]
        if s is None:
            table.add_row(plain(c["name"]), plain(c.get("type")), "not running here", "-", "-",
                          "-", "-")
            continue
        table.add_row(
            plain(c["name"]),
            plain(c.get("type")),
            plain(s["state"]),
            f"{s['polls']} ({s['failed_polls']} failed)",
            _when(s["last_poll_started"]),
            plain(cursor_summary(s.get("cursor"))),
            plain(s["last_error"] or "-"),
        )
    print_table(table)


def _statuses(http: httpx.Client, url: str, gw: str, name: str) -> Iterator[dict[str, Any]]:
    """Connector ``name``'s status documents, one every :data:`_FOLLOW_EVERY_S` seconds."""
    while True:
        status = admin_get(http, f"/v1/admin/connectors/{gw}/{name}/status")
        if status is None:
            raise NotFoundError(
                f"connector {name!r} does not run on gateway {gw!r} at {url}; "
                f"`lakesync connectors --gw {gw}` lists its connectors"
            )
        yield status
        time.sleep(_FOLLOW_EVERY_S)


def follow_first_load(
    statuses: Iterable[Mapping[str, Any]], name: str, console: Console
) -> FirstLoad:
    """Follow connector ``name``'s first load through its ``statuses`` until it ends and return
    it. In a terminal ``console`` shows the rows read and deltas pushed so far, the poller's
    state and the time elapsed, gone once the load ends; elsewhere it shows nothing (the caller
    prints the summary line)."""
    load = FirstLoad(name)
    if not console.is_terminal:
        for status in statuses:
            if load.observe(status):
                break
        return load
    with Progress(
        SpinnerColumn(),
        TextColumn("connector {task.description}: {task.fields[state]}", markup=False),
        TextColumn("{task.completed} rows read, {task.fields[pushed]} deltas pushed"),
        TimeElapsedColumn(),
        console=console,
        transient=True,  # the summary line follows
    ) as progress:
        task = progress.add_task(printable(name), total=None, state=printable(load.state),
                                 pushed=0)
        for status in statuses:
            ended = load.observe(status)
            progress.update(task, completed=load.rows_read, state=printable(load.state),
                            pushed=load.deltas_pushed)
            progress.refresh()  # each status read, not at the next tick: a load can be quick
            if ended:
                break
    return load
