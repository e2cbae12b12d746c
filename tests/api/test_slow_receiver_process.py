"""A WebSocket receiver too slow for its broadcasts, against a real gateway process: its send
queue is bounded, it is dropped with 4408 (docs/protocol.md §9) while the other receivers go
on, and the frames queued before the drop still reach it, ahead of the close; and the
keepalive pings ``server.ws_ping_interval`` paces (none at 0)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.sync.client import connect
from websockets.uri import parse_uri

from lakesync.wsframes import CLOSE_TOO_SLOW, decode_server_frame
from tests.api.helpers import auth, delta, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

pytestmark = pytest.mark.slow


def gateway_metrics(server: ServerProcess, gw: str) -> dict[str, object]:
    r = httpx.get(f"{server.url}/v1/admin/metrics/{gw}", headers=auth(token("root", gw, "admin")))
    assert r.status_code == 200, r.text
    found: dict[str, object] = r.json()
    return found


def ws_connections(server: ServerProcess, gw: str) -> int:
    return int(str(gateway_metrics(server, gw)["wsConnections"]))


class StalledSocket:
    """A WebSocket client that opens its connection and then reads nothing until asked to
    (websockets' sans-I/O protocol over a plain socket): a receiver that stopped taking."""

    def __init__(self, url: str) -> None:
        self.protocol = ClientProtocol(parse_uri(url), max_size=None)
        uri = self.protocol.uri
        self.sock = socket.create_connection((uri.host, uri.port))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        self.protocol.send_request(self.protocol.connect())
        self.sock.sendall(b"".join(self.protocol.data_to_send()))

    def pings_within(self, seconds: float) -> int:
        """The keepalive pings the gateway sends in ``seconds`` (answered by the protocol)."""
        pings = 0
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                break
            self.protocol.receive_data(data)
            for event in self.protocol.events_received():
                pings += isinstance(event, Frame) and event.opcode is Opcode.PING
            self.sock.sendall(b"".join(self.protocol.data_to_send()))  # the pongs
        return pings

    def read_to_close(self, timeout: float) -> tuple[list[bytes], int | None]:
        """Read everything until the gateway closes: the binary frames, and the close code."""
        self.sock.settimeout(timeout)
        frames = []
        while self.protocol.close_rcvd is None:
            data = self.sock.recv(1 << 16)
            if not data:
                break
            self.protocol.receive_data(data)
            for event in self.protocol.events_received():
                if isinstance(event, Frame) and event.opcode is Opcode.BINARY:
                    frames.append(bytes(event.data))
        self.sock.close()
        close = self.protocol.close_rcvd
        return frames, None if close is None else close.code


def test_a_receiver_that_stops_reading_is_dropped_with_4408(tmp_path: Path) -> None:
    env = {"LAKESYNC_WS_RATE_LIMIT": "0", "LAKESYNC_WS_SEND_QUEUE_BYTES": str(64 * 1024)}
    server = ServerProcess(tmp_path / "data", env).start()
    try:
        url = f"{server.ws_url}/v1/sync/gw1/ws?token="
        slow = StalledSocket(url + token("slow"))
        with (
            connect(url + token("fast"), max_size=None) as fast,
            httpx.Client(base_url=server.url, headers=auth(token("w"))) as http,
        ):
            deadline = time.monotonic() + 30
            while ws_connections(server, "gw1") < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            sent = 0
            while ws_connections(server, "gw1") == 2:
                # Within the gateway's keepalive (20 s), which would close it otherwise.
                assert sent < 100, "the slow receiver was never dropped"
                body = [
                    as_json(delta("INSERT", f"r{sent}-{i}", "w", x="y" * 4000)) for i in range(100)
                ]
                r = http.post("/v1/sync/gw1/push", json={"clientId": "w", "deltas": body})
                assert r.status_code == 200, r.text
                sent += 1
                # The receiver that keeps up gets every broadcast.
                assert decode_server_frame(fast.recv(timeout=15)).broadcast  # type: ignore[arg-type]
        assert "too slow for its broadcasts" in server.log_path.read_text()
        # Counted: the admin metrics and Prometheus' /metrics show the drop.
        assert gateway_metrics(server, "gw1")["wsDropped"] == 1
        exposition = httpx.get(f"{server.url}/metrics").text
        assert 'lakesync_ws_dropped_total{gateway="gw1"} 1.0' in exposition
        frames, code = slow.read_to_close(timeout=30)
        assert code == CLOSE_TOO_SLOW
        # What was sent or queued before the drop arrives first, then the close.
        assert 0 < len(frames) < sent
        assert all(decode_server_frame(f).broadcast for f in frames)
    finally:
        server.stop()


@pytest.mark.parametrize(("interval", "pinged"), [("1", True), ("0", False)])
def test_keepalive_pings_follow_ws_ping_interval(
    tmp_path: Path, interval: str, pinged: bool
) -> None:
    server = ServerProcess(tmp_path / "data", {"LAKESYNC_WS_PING_INTERVAL": interval}).start()
    try:
        sock = StalledSocket(f"{server.ws_url}/v1/sync/gw1/ws?token={token('idle')}")
        # Every second with 1 (the first within 1 s of the handshake); none at all with 0.
        pings = sock.pings_within(8.0)
        assert (pings >= 1) == pinged, pings
        sock.sock.close()
    finally:
        server.stop()
