"""A loopback TCP proxy that can be frozen: while frozen, no byte flows either way and no new
connection is served, yet every socket stays open, as a network partition looks to both ends
(no reset, no FIN). Used between a gateway and PostgreSQL, and between clients and a gateway.

Its kernel still acknowledges the bytes it receives, so TCP keepalives across it succeed: a
freeze exercises the peers' statement, lock and idle timeouts, not keepalive detection.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["FreezableProxy"]


class FreezableProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream_port`` on loopback."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        """Stop every byte, keep every connection."""
        self._flowing.clear()

    def thaw(self) -> None:
        """Let bytes flow again (what waited is delivered)."""
        self._flowing.set()

    def close(self) -> None:
        """Stop for good, closing every connection."""
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            _close(s)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._flowing.wait()
            try:
                server = socket.create_connection(("127.0.0.1", self._upstream), timeout=10)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._socks.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)
        with self._lock:
            self._socks.discard(src)
            self._socks.discard(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
