"""A TCP proxy that can cut a connection right after the gateway answered (a lost ack)."""

from __future__ import annotations

import contextlib
import socket
import threading


class FlakyProxy:
    """Forwards 127.0.0.1:<port> to the gateway; :meth:`arm` drops the next reply.

    Once armed (directly, or when client bytes contain ``trigger``), the next bytes coming back
    from the gateway are thrown away and both sides closed: the gateway did the work, the client
    never hears of it.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.trigger: bytes | None = None
        self.cuts = 0
        self._armed = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self) -> None:
        self._armed.set()

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            pair = (client, upstream)
            threading.Thread(
                target=self._pipe, args=(client, upstream, True, pair), daemon=True
            ).start()
            threading.Thread(
                target=self._pipe, args=(upstream, client, False, pair), daemon=True
            ).start()

    def _pipe(
        self, src: socket.socket, dst: socket.socket, up: bool, pair: tuple[socket.socket, ...]
    ) -> None:
        try:
            while data := src.recv(65536):
                if up and self.trigger is not None and self.trigger in data:
                    self._armed.set()
                if not up and self._armed.is_set():
                    self._armed.clear()
                    self.cuts += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in pair:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
