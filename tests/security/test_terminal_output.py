"""``lakesync status`` against a real gateway whose clients chose hostile ids (their token's
``sub``) and whose destination's error echoes a hostile name: everything is printed as the text
it is, markup and all, with control characters shown escaped, in the tables and in ``--json``;
nothing crashes, links nothing, and no escape sequence reaches the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from tests.api.helpers import delta
from tests.gateway_process import ROOT, ServerProcess
from tests.wire_json import as_json

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CLIENTS = {
    "markup": "[/]",
    "link": "[link=https://evil.example]click[/link]",
    "osc": "\x1b]0;owned\x07title",
}
"""A gateway per hostile client id (``lakesync status --gw`` shows one at a time)."""
SHOWN = {
    "markup": "[/]",
    "link": "[link=https://evil.example]click[/link]",
    "osc": "\\x1b]0;owned\\x07title",
}
"""How each id reads in the terminal."""
DATABASE = "[bold]x[/] \x1b[31m"
"""A destination's database: PostgreSQL's refusal names it, so the status error carries it."""

CONFIG = """
gateways:
{gateways}
destinations:
  warehouse:
    kind: postgres
    url: "{url}"
    gateway: upstream
server:
  flush_interval: 0
"""
_GATEWAY = """  {gw}:
    schemas:
      - table: todos
        columns: [{{name: t, type: string}}]
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from tests.conftest import require_postgres

    require_postgres()
    base = os.environ["LAKESYNC_TEST_PG_DSN"].rsplit("/", 1)[0]
    tmp = tmp_path_factory.mktemp("hostile")
    config = tmp / "lakesync.yaml"
    gateways = "".join(_GATEWAY.format(gw=gw) for gw in [*CLIENTS, "upstream"])
    config.write_text(CONFIG.format(gateways=gateways, url=f"{base}/{quote(DATABASE, safe='')}"))
    with ServerProcess(tmp / "data", config=config) as gw, httpx.Client(base_url=gw.url) as http:
        for gateway, client in CLIENTS.items():
            body = {"clientId": client, "deltas": [as_json(delta("INSERT", "r1", client, t="a"))]}
            auth = {"Authorization": f"Bearer {gw.token(client, gateway)}"}
            pushed = http.post(f"/v1/sync/{gateway}/push", json=body, headers=auth)
            assert pushed.status_code == 200, pushed.text
        yield gw


def _status(gw: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": gw.secret}
    env.pop("LAKESYNC_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "status", "--url", gw.url, *args],
        capture_output=True, env=env, timeout=120, check=False, text=True,
    )


def _plain(done: subprocess.CompletedProcess[str]) -> None:
    """No traceback, no escape or bell character on either stream."""
    for stream in (done.stdout, done.stderr):
        assert "Traceback" not in stream and "MarkupError" not in stream, stream
        assert "\x1b" not in stream and "\x07" not in stream, repr(stream)


@pytest.mark.parametrize("gw", sorted(CLIENTS))
def test_a_hostile_client_id_is_printed_as_text(gateway: ServerProcess, gw: str) -> None:
    done = _status(gateway, "--gw", gw)
    _plain(done)
    assert done.returncode == 0, done.stdout + done.stderr
    assert SHOWN[gw] in done.stdout


def test_a_hostile_upstream_error_is_printed_as_text(gateway: ServerProcess) -> None:
    done = _status(gateway, "--gw", "upstream")
    _plain(done)
    assert done.returncode == 1, done.stdout + done.stderr
    shown = "[bold]x[/] \\x1b[31m"
    assert shown in done.stderr and shown in done.stdout


def test_json_carries_the_values_as_they_are(gateway: ServerProcess) -> None:
    done = _status(gateway, "--json")
    _plain(done)
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    clients = {g["gateway"]: [c["client_id"] for c in g["clients"]] for g in body["gateways"]}
    assert {gw: clients[gw] for gw in CLIENTS} == {gw: [c] for gw, c in CLIENTS.items()}
    (failing,) = body["failing"]
    assert DATABASE in failing
    assert "failing: upstream: destination warehouse" in done.stderr
    assert "[bold]x[/] \\x1b[31m" in done.stderr
