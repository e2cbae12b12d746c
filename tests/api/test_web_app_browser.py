"""A web app on another origin: the original TypeScript LakeSync client, bundled for the browser
(``bun build --target browser``, its sql.js replica beside it), loaded in Chromium from one
loopback origin and syncing with ``lakesync up`` on another (``server.cors_origins`` lists the
page's origin) under sync rules: push, pull, a first sync from a checkpoint (its
``X-Checkpoint-Hlc`` read by the page), the WebSocket transport with a broadcast, and a 401 the
app reads (status, code and request id). A page of an origin outside the list is refused: its
requests fail as network errors, store nothing, and its WebSocket is closed 1008."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from lakesync.hlc import HLC
from lakesync.hotlog.factory import open_store
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from tests.api.helpers import auth, token
from tests.browser import chromium
from tests.gateway_process import ServerProcess, free_port
from tests.lakesync_ts import build_browser_bundle, require_ts_client

pytestmark = pytest.mark.slow

SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                        {"name": "team", "type": "string"}]}
TEAM_RULES = {
    "version": 1,
    "buckets": [{"name": "team", "tables": ["todos"],
                 "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}],
}
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>a web app</title><link rel="icon" href="data:,"></head>
<body><script type="module" src="lakesync-probe.js"></script></body></html>
"""


class _Files(SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _static_site(root: Path) -> Iterator[int]:
    """Serve ``root`` over HTTP on a loopback port (yielded): the web app's own origin."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()),
                                 functools.partial(_Files, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join()


def _checkpoint(data_dir: Path) -> int:
    """Publish a checkpoint of the (stopped) gateway's rows, as a pipeline run would; returns
    its position."""
    store = open_store("sqlite", data_dir, HLC())
    try:
        page = store.read_all_rows("gw1")
        assert write_checkpoint(store, "gw1", page.head, sorted(page.rows.items())) is not None
        return page.head
    finally:
        store.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[int]:
    """The bundled client and its page, served on their own port."""
    require_ts_client()
    root = build_browser_bundle(tmp_path / "site")
    (root / "index.html").write_text(PAGE, encoding="utf-8")
    with _static_site(root) as port:
        yield port


def _open(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_function("() => globalThis.lakesyncProbe !== undefined", timeout=60_000)


def test_a_web_app_on_another_origin_syncs_through_the_gateway(
    tmp_path: Path, site: int
) -> None:
    app_origin = f"http://127.0.0.1:{site}"
    other_origin = f"http://localhost:{site}"  # the same files, another origin: not listed
    gateway = ServerProcess(tmp_path / "data", env={
        "LAKESYNC_FLUSH_INTERVAL": "0", "LAKESYNC_CORS_ORIGINS": app_origin})
    red = {sub: token(sub, team="red") for sub in ("a", "b", "w", "x")}
    dora = token("dora", team="blue")
    with gateway, chromium(tmp_path / "profile") as browser:
        admin = auth(token("root", role="admin"))
        for path, body in (("schema", SCHEMA), ("sync-rules", TEAM_RULES)):
            r = httpx.post(f"{gateway.url}/v1/admin/{path}/gw1", json=body, headers=admin)
            assert r.status_code == 200, r.text

        page = browser.new_page()
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda req: requests.append(req.url))
        _open(page, f"{app_origin}/index.html")
        config = {"url": gateway.url, "gw": "gw1", "wasmUrl": f"{app_origin}/sql-wasm.wasm"}

        # Push: a (team red) and dora (team blue) each write a row; their first syncs ask for
        # a checkpoint (404, which the page reads) and pull.
        pushed = page.evaluate("""async ({config, a, dora}) => {
            const {ProbeClient} = globalThis.lakesyncProbe;
            const ca = await ProbeClient.open({...config, token: a, clientId: "a"});
            const cd = await ProbeClient.open({...config, token: dora, clientId: "dora"});
            await ca.insert("r1", {title: "from a", team: "red"});
            await cd.insert("r2", {title: "from dora", team: "blue"});
            await ca.sync();
            await cd.sync();
            globalThis.a = ca;
            return {queued: (await ca.queued()) + (await cd.queued()), a: await ca.rows()};
        }""", {"config": config, "a": red["a"], "dora": dora})
        assert pushed == {"queued": 0, "a": [{"id": "r1", "title": "from a", "team": "red"}]}

        # A checkpoint, as a pipeline run publishes one (the gateway is stopped meanwhile).
        gateway.stop()
        position = _checkpoint(gateway.data_dir)
        gateway.start()

        # b's first sync downloads the checkpoint: the page reads X-Checkpoint-Hlc, and b
        # holds its team's rows only. Then a pushes again and b pulls it.
        first = page.evaluate("""async ({config, b}) => {
            const {ProbeClient, HttpTransport} = globalThis.lakesyncProbe;
            const http = new HttpTransport({baseUrl: config.url, gatewayId: config.gw, token: b});
            const checkpoint = await http.checkpoint();
            if (!checkpoint.ok) throw checkpoint.error;
            const cb = await ProbeClient.open({...config, token: b, clientId: "b"});
            await cb.sync();
            const afterCheckpoint = await cb.rows();
            await globalThis.a.insert("r3", {title: "again", team: "red"});
            await globalThis.a.sync();
            await cb.sync();
            return {
                position: String(checkpoint.value.snapshotHlc),
                rows: checkpoint.value.deltas.map((d) => d.rowId),
                afterCheckpoint,
                afterPull: await cb.rows(),
            };
        }""", {"config": config, "b": red["b"]})
        assert first["position"] == str(position)
        assert set(first["rows"]) == {"r1"}
        assert first["afterCheckpoint"] == [{"id": "r1", "title": "from a", "team": "red"}]
        assert [r["id"] for r in first["afterPull"]] == ["r1", "r3"]

        # The WebSocket transport: a first sync, then a's next row arrives as a broadcast.
        live = page.evaluate("""async ({config, w}) => {
            const {ProbeClient, until} = globalThis.lakesyncProbe;
            const cw = await ProbeClient.open({...config, token: w, clientId: "w", ws: true});
            await cw.sync();
            const first = (await cw.rows()).map((r) => r.id);
            await globalThis.a.insert("r4", {title: "live", team: "red"});
            await globalThis.a.sync();
            await until("w: the broadcast of r4", async () => (await cw.rows()).length === 3);
            const result = {first, rows: (await cw.rows()).map((r) => r.id),
                            broadcasts: cw.broadcasts};
            cw.close();
            return result;
        }""", {"config": config, "w": red["w"]})
        assert live["first"] == ["r1", "r3"]
        assert live["rows"] == ["r1", "r3", "r4"] and live["broadcasts"] >= 1

        # A refused token: the app reads the status, the code and the request id.
        refused = page.evaluate("""async (config) => {
            const {HttpTransport} = globalThis.lakesyncProbe;
            const http = new HttpTransport({baseUrl: config.url, gatewayId: config.gw,
                                            token: "not-a-token"});
            const pulled = await http.pull({clientId: "a", sinceHlc: 0n, maxDeltas: 10});
            return pulled.ok ? "accepted" : pulled.error.message;
        }""", config)
        assert refused.startswith("Pull failed (401): ") and "[AUTH_ERROR]" in refused
        assert "(requestId: " in refused
        page.close()

        # A page of an origin the gateway does not list: the browser refuses every request
        # (a network error, no status), nothing is stored, and its WebSocket is closed 1008.
        assert not [u for u in requests
                    if not u.startswith((f"{app_origin}/", f"{gateway.url}/"))]
        # Chromium logs each error status; the expected ones (no checkpoint yet, the refused
        # token) are all, and no request was blocked by CORS.
        unexpected = [e for e in errors if not e.startswith(
            ("Failed to load resource: the server responded with a status of 404 (Not Found)",
             "Failed to load resource: the server responded with a status of 401"))]
        assert unexpected == [], errors
        outsider = browser.new_page()
        _open(outsider, f"{other_origin}/index.html")
        blocked = outsider.evaluate("""async ({config, x}) => {
            const {HttpTransport} = globalThis.lakesyncProbe;
            const http = new HttpTransport({baseUrl: config.url, gatewayId: config.gw, token: x});
            const pushed = await http.push({clientId: "x", deltas: [], lastSeenHlc: 0n});
            const pulled = await http.pull({clientId: "x", sinceHlc: 0n, maxDeltas: 10});
            const url = config.url.replace(/^http/, "ws") + "/v1/sync/gw1/ws?token=" + x;
            const closed = await new Promise((resolve) => {
                const socket = new WebSocket(url);
                socket.onclose = (event) => resolve(event.code);
            });
            return {
                push: pushed.ok ? "accepted" : pushed.error.message,
                pull: pulled.ok ? "accepted" : pulled.error.message,
                closed,
            };
        }""", {"config": {**config, "wasmUrl": f"{other_origin}/sql-wasm.wasm"}, "x": red["x"]})
        assert blocked["push"].startswith("Push request failed: ")  # no status reached it
        assert blocked["pull"].startswith("Pull request failed: ")
        assert blocked["closed"] == 1008
        outsider.close()

        # Nothing of the outsider reached the gateway's state: b still sees a's rows only.
        r = httpx.get(f"{gateway.url}/v1/sync/gw1/pull?clientId=b", headers=auth(red["b"]))
        assert r.status_code == 200
        assert {d["rowId"] for d in r.json()["deltas"]} == {"r1", "r3", "r4"}
