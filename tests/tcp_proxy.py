"""A loopback TCP proxy a test puts between one process and a real server (PostgreSQL) to cut
that process off without closing anything: :meth:`TcpProxy.freeze` stops forwarding bytes in
both directions and serves no new connection while every socket stays open (as a network
partition or a paused peer looks to both ends), :meth:`TcpProxy.thaw` forwards what waited and
goes on. Its kernel still acknowledges what it receives, so TCP keepalives across it succeed: a
freeze exercises the peers' statement, lock and idle timeouts, not keepalive detection.

:meth:`TcpProxy.freeze_after` freezes at a chosen moment instead of a chosen time: right after
the client's bytes that hold a marker were forwarded (the server acts on them, the client never
hears back). Only this proxy freezes: the shared server behind it keeps serving everyone else.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """A proxy on a free loopback port to the TCP server at ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._marker: bytes | None = None
        self.frozen = threading.Event()
        """Set while the proxy is frozen."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def freeze(self) -> None:
        """Stop forwarding, in both directions, on every connection; nothing is closed."""
        self._flowing.clear()
        self.frozen.set()

    def freeze_after(self, marker: bytes) -> None:
        """Freeze right after forwarding the next bytes from a client that hold ``marker``."""
        with self._lock:
            self._marker = marker

    def thaw(self) -> None:
        """Forward again (what waited first)."""
        self.frozen.clear()
        self._flowing.set()

    def close(self) -> None:
        """Close the listener and every connection."""
        self._closed.set()
        self.thaw()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, set()
        for sock in socks:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            while not self._flowing.wait(0.1):  # a partition lets no new connection through
                if self._closed.is_set():
                    _close(client)
                    return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._socks.update((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                while not self._flowing.wait(0.1):
                    if self._closed.is_set():
                        return
                dst.sendall(data)
                if from_client:
                    with self._lock:
                        hit = self._marker is not None and self._marker in data
                        if hit:
                            self._marker = None
                    if hit:
                        self.freeze()
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it
    with contextlib.suppress(OSError):
        sock.close()
