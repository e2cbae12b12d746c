"""The web console in a real browser: Debian's Chromium driven by Playwright against a gateway
served over real HTTP. Sign in, watch the numbers change after pushes and a recorded pipeline
run, follow a failing destination to its error; no console errors, every request stays on the
gateway's origin, and the token never appears in a URL. Screenshots of the overview and of the
failing destination go to ``test-artifacts/console/`` (kept by CI)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.api.app import create_app
from lakesync.api.lake import record_pipeline_run, record_shipped
from lakesync.api.services.console import SESSION_COOKIE
from lakesync.destination_specs import DestinationSpec
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.worker import RunReply
from lakesync.status import Shipment
from tests.api.helpers import auth, delta, make_settings, token
from tests.browser import chromium
from tests.gateway_process import free_port, serve_in_thread
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "chromium-profile") as context:
        yield context


def _push(base: str, n: int, first: int) -> None:
    alice = token("alice")
    rows = [delta("INSERT", f"r{first + i}", "alice", title="t") for i in range(n)]
    body = {"clientId": "alice", "deltas": [as_json(d) for d in rows]}
    r = httpx.post(f"{base}/v1/sync/gw1/push", json=body, headers=auth(alice))
    assert r.status_code == 200, r.text


def test_console_in_chromium(tmp_path: Path, browser: Any) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    destinations = {
        "stopped": DestinationSpec("postgres", closed, "gw1", tables=["todos"], name="stopped"),
    }
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    settings = make_settings(tmp_path, destinations=destinations, console_sample_s=0.5)
    admin = token("root", role="admin")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    with serve_in_thread(create_app(settings, store=store)) as base:
        r = httpx.post(f"{base}/v1/admin/schema/gw1", json=SCHEMA, headers=auth(admin))
        assert r.status_code == 200, r.text
        _push(base, 2, 0)
        page = browser.new_page()
        try:
            errors, requests = _walk_through(page, browser, base, store, admin)
        finally:
            page.close()  # ends its live stream, which the server's shutdown waits for

    assert errors == []
    assert requests and all(u.startswith(f"{base}/") for u in requests), requests
    assert not any(admin in u for u in requests)


def _walk_through(
    page: Any, browser: Any, base: str, store: SqliteHotLog, admin: str
) -> tuple[list[str], list[str]]:
    """Drive the console; returns the console errors and the URLs requested."""
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: requests.append(req.url))

    page.goto(f"{base}/console")
    page.fill("#token", admin)
    page.click("#sign-in button[type=submit]")
    counts = page.locator("[data-gateway=gw1] [data-metric=counts]")
    counts.wait_for(timeout=30_000)
    page.locator("#live.on").wait_for(timeout=30_000)
    _wait_text(counts, "1 · 0 · 2")  # pushes · pulls · deltas
    assert not page.locator("#sign-in").is_visible()

    cookies = {c["name"]: c for c in browser.cookies()}
    assert cookies[SESSION_COOKIE]["httpOnly"] and cookies[SESSION_COOKIE]["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # the session is out of the page's reach

    # Pushes move the numbers on the live overview, without a reload.
    _push(base, 3, 2)
    _push(base, 1, 5)
    _wait_text(counts, "3 · 0 · 6")

    # A pipeline run, as the scheduler records it, shows up with its duration.
    runs = page.locator("[data-gateway=gw1] [data-metric=runs]")
    assert runs.inner_text() == "none recorded"
    record_pipeline_run(store, time.time() - 3, RunReply(
        ok=True, rows_merged=6, elapsed_s=2.5, position=store.head(),
        shipments=[Shipment("stopped", "todos", 0, "connection refused")],
    ))
    _wait_text(runs, "1 · ok, 2.5 s", prefix=True)
    page.locator(".u-over").first.wait_for()  # the charts are drawn
    page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)

    # The failing destination is named on the overview; its link leads to the error.
    failing = page.locator("#failing-list a", has_text="destination stopped")
    failing.click()
    error = page.locator("#destination-error")
    error.wait_for(timeout=30_000)
    assert "unreachable" in error.inner_text()
    assert "last shipment failed: todos: connection refused" in error.inner_text()
    assert page.locator("#view h1").inner_text() == "Destination stopped"
    page.screenshot(path=str(ARTIFACTS / "failing-destination.png"), full_page=True)

    # The run's own page, and the gateway's page with its table and row count.
    page.goto(f"{base}/console#/gateways/gw1/runs/0")
    page.locator("text=rows merged").wait_for()
    page.goto(f"{base}/console#/gateways/gw1")
    page.locator("#tables td", has_text="todos").wait_for(timeout=30_000)
    assert "6" in page.locator("#tables tbody tr").first.inner_text()

    # Readable on a phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/console#/")
    counts.wait_for(timeout=30_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    return errors, requests


def _wait_text(locator: Any, expected: str, prefix: bool = False) -> None:
    """Wait for a live-updated element to show ``expected`` (the console samples every 0.5 s)."""
    deadline = time.monotonic() + 60
    while True:
        text = locator.inner_text()
        if text == expected or (prefix and text.startswith(expected)):
            return
        assert time.monotonic() < deadline, f"still {text!r}, waiting for {expected!r}"
        time.sleep(0.2)


def test_console_reads_right_from_the_first_sample(tmp_path: Path, browser: Any) -> None:
    """One sample only (the next is an hour away): every chart already reads right. Time axes
    span a minute ending now (not years), the lag chart has its flush line, the run chart says
    there is no run yet, coinciding rate lines are drawn apart, counts have whole-number axes
    from 0 to 1 for zeros; a destination that shipped rows and is now unreachable has an
    unknown lag and unknown tables (not "none"); signed out, no live badge."""
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    destinations = {
        "stopped": DestinationSpec("postgres", closed, "gw1", tables=["todos"], name="stopped"),
    }
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    settings = make_settings(tmp_path, destinations=destinations, console_sample_s=3600)
    admin = token("root", role="admin")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    record_shipped(store, [Shipment("stopped", "todos", 3)])  # it shipped, then went away

    with serve_in_thread(create_app(settings, store=store)) as base:
        r = httpx.post(f"{base}/v1/admin/schema/gw1", json=SCHEMA, headers=auth(admin))
        assert r.status_code == 200, r.text
        page = browser.new_page()
        try:
            errors = _first_sample(page, base, store, admin)
        finally:
            page.close()
    assert errors == []


def _first_sample(page: Any, base: str, store: SqliteHotLog, admin: str) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(f"{base}/console")
    page.locator("#sign-in").wait_for(timeout=30_000)
    assert "lakesync token --role admin" in page.locator("#sign-in").inner_text()
    assert not page.locator("#live").is_visible()  # signed out: no "offline" badge
    page.screenshot(path=str(ARTIFACTS / "sign-in.png"), full_page=True)

    page.fill("#token", admin)
    page.click("#sign-in button[type=submit]")
    page.locator("#live.on").wait_for(timeout=30_000)
    _wait_text(page.locator("[data-gateway=gw1] [data-metric=counts]"), "0 · 0 · 0")
    page.locator(".u-over").first.wait_for()
    now = time.time()

    for key in ("rates", "lag", "clients"):
        x0, x1 = json.loads(_chart(page, key)["x"])
        assert 60 <= x1 - x0 <= 3600, (key, x0, x1)  # a minute to an hour, not years
        assert abs(x1 - now) < 600, (key, x1, now)

    rates = _chart(page, "rates")
    assert "two samples" in rates["empty"]
    styles = [(s["width"], str(s["dash"])) for s in json.loads(rates["series"])]
    assert len(set(styles)) == 3, styles  # pushes/s, pulls/s, deltas/s each drawn apart

    lag = _chart(page, "lag")
    assert lag["empty"] is None  # the flush line: 0 s, nothing waiting

    clients = _chart(page, "clients")
    assert json.loads(clients["y"]) == [0, 1]
    assert json.loads(clients["ticks"]) == ["0", "1"]

    runs = _chart(page, "runs")
    assert "No runs yet" in runs["empty"]
    page.screenshot(path=str(ARTIFACTS / "first-sample.png"), full_page=True)

    page.goto(f"{base}/console#/gateways/gw1/destinations/stopped")
    page.locator("#destination-error").wait_for(timeout=30_000)
    assert page.locator("#destination-lag").inner_text() == "unknown (unreachable)"
    assert "could not be read" in page.locator("#destination-tables").inner_text()
    page.goto(f"{base}/console#/gateways/gw1")
    row = page.locator("#destinations tbody tr").first
    row.wait_for(timeout=30_000)
    assert "unknown (unreachable)" in row.inner_text()
    assert "3 rows" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "unreachable-destination.png"), full_page=True)

    return errors


def test_run_numbers_are_whole(tmp_path: Path, browser: Any) -> None:
    """Three recorded runs: the run-duration chart's x axis reads 1, 2, 3 (no 1.5)."""
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    for i, elapsed in enumerate((12.0, 30.5, 8.25)):
        record_pipeline_run(store, time.time() - 100 + i, RunReply(ok=True, elapsed_s=elapsed))
    settings = make_settings(tmp_path, console_sample_s=3600)
    admin = token("root", role="admin")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with serve_in_thread(create_app(settings, store=store)) as base:
        r = httpx.post(f"{base}/v1/admin/schema/gw1", json=SCHEMA, headers=auth(admin))
        assert r.status_code == 200, r.text
        page = browser.new_page()
        try:
            page.goto(f"{base}/console")
            page.fill("#token", admin)
            page.click("#sign-in button[type=submit]")
            page.locator("[data-chart=runs][data-x-ticks]").wait_for(timeout=30_000)
            runs = _chart(page, "runs")
            page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)
        finally:
            page.close()
    assert runs["empty"] is None
    assert json.loads(runs["xTicks"]) == ["1", "2", "3"]


def _chart(page: Any, key: str) -> dict[str, Any]:
    """What the overview's chart ``key`` drew (its box's data attributes) and its empty-state
    text (None when it has something to draw)."""
    box = page.locator(f"[data-chart={key}]").first
    box.wait_for()
    attrs: dict[str, Any] = page.evaluate(
        "(el) => ({...el.dataset, empty: el.querySelector('.empty').hidden ? null"
        " : el.querySelector('.empty').textContent})", box.element_handle())
    return attrs
