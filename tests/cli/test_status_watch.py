"""``lakesync status`` as an operator reads it: the tables fit 80 columns with every heading
whole, refusals are in the text, ``--watch`` prints one line per refresh when piped and keeps
its admin token valid past one token's lifetime."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import jwt
import pytest
from rich.console import Console

from lakesync.cli.connectors import AdminTokens
from lakesync.cli.status import fetch_status, status_line, status_tables, watch_status
from lakesync.status import (
    Backlog,
    ClientStatus,
    DestinationStatus,
    GatewayStatus,
    HotLogStatus,
    LandingStatus,
    PipelineRun,
    PipelineStatus,
    Refusals,
    StatusResponse,
)
from tests.gateway_process import ROOT, SECRET, ServerProcess

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
HEADINGS = [
    "gateway", "hot log", "landing lag", "last flush", "last pipeline run", "freshness",
    "pipeline lag", "clients", "destination", "kind", "lag", "last shipment", "error",
    "client", "sockets", "last seen", "outbox", "dead letters",
]


def _status(failing: list[str] | None = None) -> StatusResponse:
    gateway = GatewayStatus(
        gateway="shop",
        hot_log=HotLogStatus(12345, False, 987654, "99", None),
        landing=LandingStatus(NOW, "99", Backlog(deltas=0)),
        pipeline=PipelineStatus(
            scheduled=True,
            runs=[PipelineRun(NOW, 12.5, True, "", 400, 400, "1")],
            freshness_s=30.0,
            lag=Backlog(deltas=17, oldest_age_s=42.0),
        ),
        destinations=[
            DestinationStatus(
                name="warehouse", kind="postgres", tables=[], lag=Backlog(deltas=0),
                last_shipment_at=NOW,
                last_error="connection refused by 127.0.0.1:5432 while shipping table orders",
            )
        ],
        connectors=[],
        clients=[ClientStatus("client-with-a-rather-long-id-0001", 1, NOW, 3, 2)],
        failing=failing or [],
    )
    return StatusResponse(NOW, [gateway], Refusals(validation=1, write_access=2, contract=3),
                          failing or [])


def test_the_tables_fit_80_columns_with_every_heading_whole() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    for table in status_tables(_status()):
        console.print(table)
    text = out.getvalue()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for heading in HEADINGS:
        assert heading in text, heading


def test_status_line_is_one_line_with_refusals_and_verdict() -> None:
    line = status_line(_status())
    assert "\n" not in line and line.startswith("2026-12-02T03:00:00Z shop: hot log 12345")
    assert "refused since the gateway started: 1 bad input, 2 write access, 3 contract" in line
    assert line.endswith("all well")
    assert status_line(_status(["shop: destination x unreachable"])).endswith(
        "failing: shop: destination x unreachable"
    )


def test_admin_tokens_are_minted_again_before_they_expire() -> None:
    now = [1_000_000.0]
    tokens = AdminTokens("shop", secret=SECRET, ttl_s=10, clock=lambda: now[0])
    first = tokens()
    now[0] += 4
    assert tokens() == first
    now[0] += 2  # past half its lifetime: a new one
    second = tokens()
    claims = jwt.decode(second, SECRET, algorithms=["HS256"], options={"verify_exp": False})
    assert second != first and claims["exp"] == 1_000_016 and claims["role"] == "admin"
    assert AdminTokens("shop", token="given")() == "given"


def test_piped_watch_prints_one_line_per_refresh() -> None:
    out = io.StringIO()  # not a terminal
    refreshes = iter([_status(), _status(["shop: connector c failing"]), _status()])

    def sleep(_: float) -> None:
        if len(out.getvalue().splitlines()) == 3:
            raise KeyboardInterrupt

    last = watch_status(lambda: next(refreshes), "http://x", 0.2, Console(file=out), sleep)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and last == _status()
    assert lines[1].endswith("failing: shop: connector c failing")


@pytest.mark.slow
def test_watch_renews_its_token_past_a_token_lifetime(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text("gateways:\n  shop:\n    schemas:\n"
                      "      - {table: orders, columns: [{name: total, type: number}]}\n")
    ttl = 2
    with ServerProcess(tmp_path / "data", config=config) as gw:
        tokens = AdminTokens("shop", secret=SECRET, ttl_s=ttl)
        out = io.StringIO()
        until = time.monotonic() + 3 * ttl

        def sleep(seconds: float) -> None:
            if time.monotonic() > until:  # three lifetimes of a token have passed
                raise KeyboardInterrupt
            time.sleep(seconds)

        last = watch_status(lambda: fetch_status(gw.url, tokens(), "shop"), gw.url, 0.2,
                            Console(file=out), sleep)
    lines = out.getvalue().splitlines()
    assert last is not None and len(lines) > 3 * ttl
    assert all(" shop: hot log " in line for line in lines), lines


@pytest.mark.slow
def test_piped_watch_command_prints_lines_until_interrupted(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text("gateways:\n  shop:\n    schemas:\n"
                      "      - {table: orders, columns: [{name: total, type: number}]}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": SECRET}
    env.pop("LAKESYNC_CONFIG", None)
    with ServerProcess(tmp_path / "data", config=config) as gw:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakesync.cli.main", "status", "--url", gw.url, "--watch",
             "--interval", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        )
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(2)]  # blocks until each arrives
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
    assert all(" shop: hot log " in line and line.endswith("all well\n") for line in lines), err
    assert proc.returncode == 0, err
