"""The freezable proxy of the chaos run and the fault tests: frozen, nothing flows and the
connection stays open; thawed, what waited arrives."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.tcp_proxy import TcpProxy


def _echo_server() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_a_frozen_proxy_holds_bytes_without_closing_and_delivers_them_when_thawed() -> None:
    with _echo_server() as listener:
        proxy = TcpProxy(("127.0.0.1", listener.getsockname()[1]))
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as conn:
                conn.sendall(b"before")
                assert conn.recv(1024) == b"before"
                proxy.freeze()
                conn.sendall(b"during")
                conn.settimeout(0.3)
                with pytest.raises(TimeoutError):  # held, not closed (a close reads b"")
                    conn.recv(1024)
                proxy.thaw()
                conn.settimeout(60)
                assert conn.recv(1024) == b"during"
        finally:
            proxy.close()
