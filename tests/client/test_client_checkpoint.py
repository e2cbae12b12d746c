"""The checkpoint stream (SPEC §5) over real HTTP.

The gateway answers 404 until it generates checkpoints, so a small stdlib HTTP server plays the
route here: it streams ``[uint32 big-endian length][SyncResponse]`` frames in chunks that split
frames, as a real response may arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from lakesync.client import LakeSyncClient
from lakesync.client._auth import TokenProvider
from lakesync.client.errors import ConnectionFailedError
from lakesync.client.transport import HttpTransport
from lakesync.delta import RowDelta
from lakesync.hlc import encode
from lakesync.tokens import mint_token
from lakesync.wire import pull_response
from lakesync.wsframes import encode_response

BASE = encode(1_700_000_000_000, 0)
PAGES = [
    [RowDelta.create("INSERT", "t", f"r{i}", "x", {"a": i}, BASE + i) for i in range(3)],
    [RowDelta.create("DELETE", "t", "r1", "x", {}, BASE + 10)],
]
CHECKPOINT_HLC = BASE + 100
SECRET = "checkpoint-secret-checkpoint-secret-0123"


def _body() -> bytes:
    out = b""
    for page in PAGES:
        frame = encode_response(page, CHECKPOINT_HLC, False)
        out += len(frame).to_bytes(4, "big") + frame
    return out


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"
    seen_tokens: list[str] = []  # noqa: RUF012
    pulls: list[str] = []  # noqa: RUF012

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen_tokens.append(auth)
        if self.path.startswith("/v1/sync/gw/pull"):
            self.pulls.append(self.path)
            self._send(200, msgspec.json.encode(pull_response([], CHECKPOINT_HLC, False)))
            return
        if self.mode == "404":
            self._send(404, b'{"error": "no checkpoint", "code": "NOT_FOUND"}')
            return
        if self.mode == "401-once" and len(self.seen_tokens) == 1:
            self._send(401, b'{"error": "expired", "code": "AUTH_ERROR"}')
            return
        body = _body()
        if self.mode == "truncated":
            body = body[:-5]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-lakesync-checkpoint-stream")
        self.send_header("X-Checkpoint-Hlc", str(CHECKPOINT_HLC))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for i in range(0, len(body), 7):  # chunks that split length prefixes and frames
            self.wfile.write(body[i : i + 7])
            self.wfile.flush()

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"seen_tokens": [], "pulls": [], "mode": "ok"})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()
    httpd.server_close()


def _transport(url: str, token: object = None) -> HttpTransport:
    tokens = TokenProvider(token or mint_token(SECRET, sub="c", gw="gw"))  # type: ignore[arg-type]
    return HttpTransport(url, "gw", tokens)


def test_checkpoint_frames_are_decoded_across_chunk_boundaries(
    server: tuple[str, type[_Handler]],
) -> None:
    url, _ = server
    cp = _transport(url).checkpoint()
    assert cp is not None and cp.server_hlc == CHECKPOINT_HLC
    assert list(cp.pages) == PAGES


def test_missing_checkpoint_is_none(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.mode = "404"
    assert _transport(url).checkpoint() is None


def test_truncated_checkpoint_raises(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.mode = "truncated"
    cp = _transport(url).checkpoint()
    assert cp is not None
    with pytest.raises(ConnectionFailedError):
        list(cp.pages)


def test_fresh_client_loads_checkpoint_then_pulls_from_its_hlc(
    server: tuple[str, type[_Handler]],
) -> None:
    url, handler = server
    handler.mode = "401-once"
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        return mint_token(SECRET, sub="c", gw="gw")

    with LakeSyncClient(":memory:", url=url, gateway_id="gw", token=token) as c:
        report = c.sync()
        assert report.pulled == 4
        assert c.query("select row_id, a from t order by row_id") == [
            {"row_id": "r0", "a": 0},
            {"row_id": "r2", "a": 2},
        ]
        assert c.status.cursor == CHECKPOINT_HLC
        assert handler.pulls and f"since={CHECKPOINT_HLC}" in handler.pulls[0]
        assert len(calls) == 2  # the 401 made the client ask for a fresh token
