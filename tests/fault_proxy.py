"""An HTTP/1.1 proxy that a test puts between a client and a real server (the S3 server, the
REST catalog) to make failures happen at a chosen request, not at a chosen moment.

:class:`FaultProxy` forwards bytes verbatim (so signed S3 requests stay valid: the ``Host``
header is the proxy's, as the client signed it), reading only each request's head and framing
(``Content-Length`` or chunked) to see where one request ends and the next starts. A test can

- :meth:`~FaultProxy.hold` the requests a predicate picks: they wait, unforwarded, until
  :meth:`~FaultProxy.release` (``held`` tells when the first one waits);
- :meth:`~FaultProxy.hold` with ``response=True``: the request reaches the server (it acts on
  it) but its response waits, so the client never hears;
- :meth:`~FaultProxy.fail` the requests a predicate picks: their connection is reset (the
  others go through) until :meth:`~FaultProxy.release`;
- :meth:`~FaultProxy.cut` the proxy: every connection is reset and new ones are refused (the
  store is unreachable) until :meth:`~FaultProxy.restore`, on the same port.

Only this proxy is cut: the shared server behind it keeps serving everyone else.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "Request"]

Request = tuple[str, str]
"""A request as the proxy sees it: ``(method, path with query)``."""


class _ClosedError(Exception):
    """The connection ended (or the proxy cut it)."""


class FaultProxy:
    """A proxy on a free loopback port to the HTTP server at ``upstream`` (``http://host:port``)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname and parts.port, upstream
        self._upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._pick: Callable[[Request], bool] | None = None
        self._hold_response = False
        self._reset = False
        self._released = threading.Event()
        self._released.set()
        self.held = threading.Event()
        """Set once a request the :meth:`hold` predicate picked is waiting."""
        self.held_requests: list[Request] = []
        self.requests: list[Request] = []
        """Every request forwarded (or held), in order."""
        self._listener = self._listen(0)
        self.port = int(self._listener.getsockname()[1])
        self._accepting = self._start_accepting()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hold(self, pick: Callable[[Request], bool], *, response: bool = False) -> None:
        """From now on, hold each request ``pick`` chooses (or, with ``response``, forward it and
        hold its response) until :meth:`release`."""
        with self._lock:
            self.held.clear()
            self.held_requests = []
            self._released.clear()
            self._pick, self._hold_response, self._reset = pick, response, False

    def fail(self, pick: Callable[[Request], bool]) -> None:
        """From now on, reset the connection of each request ``pick`` chooses (unforwarded)
        until :meth:`release`; ``held`` is set at the first."""
        self.hold(pick)
        with self._lock:
            self._reset = True

    def release(self) -> None:
        """Let every held request (or response) go on; hold no more."""
        with self._lock:
            self._pick = None
            self._released.set()

    def cut(self) -> None:
        """Reset every connection and refuse new ones: the server is unreachable."""
        listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)
        self._accepting.join(10)
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            _close(conn, reset=True)

    def restore(self) -> None:
        """Listen again, on the same port."""
        assert self._listener is None, "not cut"
        self._listener = self._listen(self.port)
        self._accepting = self._start_accepting()

    def close(self) -> None:
        """Stop for good (held requests are released first)."""
        self.release()
        self.cut()

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        return sock

    def _start_accepting(self) -> threading.Thread:
        listener = self._listener
        assert listener is not None
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        return thread

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                _close(client, reset=True)
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _close(client, reset=True)
                    _close(server)
                    return
                self._conns.update((client, server))
            held_response = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, held_response),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(server, client, held_response),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  held_response: threading.Event) -> None:
        reader = _Reader(client)
        try:
            while True:
                head = reader.head()
                method, path = head.split(b" ", 2)[:2]
                request = (method.decode(), path.decode())
                with self._lock:
                    self.requests.append(request)
                    pick = self._pick is not None and self._pick(request)
                    hold_response, reset = self._hold_response, self._reset
                if pick and reset:
                    self.held_requests.append(request)
                    self.held.set()
                    raise _ClosedError
                if pick and not hold_response:
                    self._wait(request, client)
                elif pick:
                    held_response.set()
                    self.held_requests.append(request)
                server.sendall(head)
                for chunk in reader.body(head):
                    server.sendall(chunk)
                if pick and hold_response:
                    self.held.set()
        except (_ClosedError, OSError):
            _close(client, reset=True)
            _close(server)

    def _wait(self, request: Request, conn: socket.socket) -> None:
        self.held_requests.append(request)
        self.held.set()
        while not self._released.wait(0.1):
            if conn.fileno() < 0:
                raise _ClosedError

    def _responses(self, server: socket.socket, client: socket.socket,
                   held_response: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if held_response.is_set():
                    while not self._released.wait(0.1):
                        if client.fileno() < 0:
                            raise _ClosedError
                client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except (_ClosedError, OSError):
            _close(client, reset=True)
            _close(server)


class _Reader:
    """Reads one connection's requests: heads and bodies, as their raw bytes."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def _fill(self) -> None:
        data = self._sock.recv(65536)
        if not data:
            raise _ClosedError
        self._buf += data

    def _take(self, n: int) -> bytes:
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def head(self) -> bytes:
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            self._fill()
        return self._take(end + 4)

    def _line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            self._fill()
        return self._take(end + 2)

    def _exactly(self, n: int) -> list[bytes]:
        out = []
        while n > 0:
            if not self._buf:
                self._fill()
            chunk = self._take(n)
            n -= len(chunk)
            out.append(chunk)
        return out

    def body(self, head: bytes) -> list[bytes]:
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)
        }
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            out = []
            while True:
                size_line = self._line()
                out.append(size_line)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    # Trailers, then the blank line.
                    while (line := self._line()) != b"\r\n":
                        out.append(line)
                    out.append(line)
                    return out
                out += self._exactly(size + 2)
        return self._exactly(int(headers.get(b"content-length", b"0")))


def _close(sock: socket.socket, reset: bool = False) -> None:
    with contextlib.suppress(OSError):
        if reset:  # RST on close, as a server that went away mid-request
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        # Wakes the thread blocked reading it (close alone does not), sending nothing.
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()
