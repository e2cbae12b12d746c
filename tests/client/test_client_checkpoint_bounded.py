"""A client applies a checkpoint holding a bounded number of frames, whatever its size.

A stdlib HTTP server writes a whole checkpoint stream of equal frames at once (the socket and
the kernel buffer whatever the client does not read yet). The client reports, after each frame
it applies, the rows applied so far and the stream bytes it has taken off the connection: the
bytes taken but not yet applied never exceed the frame being applied, the one decoded ahead
and one network read, for a stream of 10 frames as for one of 150.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from lakesync.client import LakeSyncClient, SyncProgress
from lakesync.delta import RowDelta
from lakesync.hlc import encode
from lakesync.tokens import mint_token
from lakesync.wire import pull_response
from lakesync.wsframes import encode_response

BASE = encode(1_700_000_000_000, 0)
POSITION = BASE + 1_000_000
SECRET = "bounded-checkpoint-secret-0123456789abcdef"
ROWS_PER_FRAME = 16
READ = 64 * 1024
"""The most one network read hands the client (httpx's read size)."""


def _stream(frames: int) -> tuple[bytes, int]:
    """A checkpoint body of ``frames`` equal frames and the size of each (length included)."""
    out = bytearray()
    size = 0
    for f in range(frames):
        page = [
            RowDelta.create(
                "INSERT", "t", f"r{f:04}-{i:03}", "w", {"a": i, "b": "x" * 8000}, BASE + i
            )
            for i in range(ROWS_PER_FRAME)
        ]
        frame = encode_response(page, POSITION, False)
        framed = len(frame).to_bytes(4, "big") + frame
        assert size in (0, len(framed))
        size = len(framed)
        out += framed
    return bytes(out), size


class _Handler(BaseHTTPRequestHandler):
    body = b""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/v1/sync/gw/checkpoint"):
            self.send_response(200)
            self.send_header("Content-Type", "application/x-lakesync-checkpoint-stream")
            self.send_header("X-Checkpoint-Hlc", str(POSITION))
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            self.wfile.write(self.body)
            return
        status, body = 404, b'{"error": "no such route", "code": "NOT_FOUND"}'
        if self.path.startswith("/v1/sync/gw/pull"):
            status, body = 200, msgspec.json.encode(pull_response([], POSITION, False))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def serve() -> Iterator[type[_Handler]]:
    handler = type("Handler", (_Handler,), {"body": b""})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.url = f"http://127.0.0.1:{httpd.server_address[1]}"  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("frames", [10, 150])
def test_a_client_holds_at_most_two_frames_of_a_checkpoint(
    serve: type[_Handler], frames: int
) -> None:
    serve.body, size = _stream(frames)
    assert size > READ  # a frame takes more than one read: the bound below is about frames
    held: list[int] = []

    def progress(p: SyncProgress) -> None:
        if p.stage == "checkpoint":
            applied = p.rows // ROWS_PER_FRAME
            held.append(p.bytes - applied * size)

    token = mint_token(SECRET, sub="c", gw="gw")
    url = serve.url  # type: ignore[attr-defined]
    with LakeSyncClient(":memory:", url=url, gateway_id="gw", token=token) as c:
        report = c.sync(on_progress=progress)
        assert report.pulled == frames * ROWS_PER_FRAME
        assert c.query("select count(*) as n from t") == [{"n": frames * ROWS_PER_FRAME}]
    assert len(held) == frames
    # Taken off the connection but not applied: the frame decoded ahead and a partial read.
    assert max(held) <= 2 * size + READ, (max(held), size)
