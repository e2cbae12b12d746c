"""A real HTTP server on a loopback port for the fake SaaS APIs: routes by method and path
regex, JSON in and out, injectable failures (status + headers for the next N requests), replies
that come late or are not JSON for requests that were acted on, and a request budget past which
every request is refused (so a client that would loop forever ends)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

Reply = tuple[int, Any, dict[str, str]]
Handler = Callable[["Request"], Reply]


class Request:
    """What a route handler sees."""

    def __init__(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: Any
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.match: re.Match[str] | None = None


class FakeServer:
    """Subclasses register routes with :meth:`route` and may check auth in :meth:`authorize`."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.failures: list[tuple[str, Reply]] = []
        self.requests: list[tuple[str, str, int]] = []
        self.request_budget: int | None = None
        self.after: list[tuple[str, float, bool]] = []
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                body: Any = raw
                if raw and "json" in (self.headers.get("Content-Type") or ""):
                    body = json.loads(raw)
                elif raw and "form" in (self.headers.get("Content-Type") or ""):
                    body = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
                req = Request(self.command, parts.path, query, self.headers, body)
                status, payload, headers = fake.dispatch(req)
                delay, garbled = fake.effect(req)
                if delay:  # the request was acted on; the reply comes late (or never)
                    time.sleep(delay)
                data = b"" if payload is None else json.dumps(payload).encode()
                kind = "application/json"
                if garbled:
                    data, kind = b"<html><body>Created</body></html>", "text/html"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle(self) -> None:
                # A client that gave up on a late reply closed the connection: not an error.
                with contextlib.suppress(ConnectionError):
                    super().handle()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, re.compile(pattern), handler))

    def fail_next(
        self,
        count: int,
        status: int,
        headers: dict[str, str] | None = None,
        body: Any = None,
        only: str = "",
    ) -> None:
        """Answer the next ``count`` requests (those whose ``METHOD /path`` starts with
        ``only``) with ``status`` (e.g. 429 + Retry-After)."""
        with self.lock:
            self.failures.extend([(only, (status, body, headers or {}))] * count)

    def slow_next(self, count: int, seconds: float, only: str = "") -> None:
        """Act on the next ``count`` requests matching ``only`` but reply ``seconds`` late (a
        client that gives up first does not know the outcome)."""
        with self.lock:
            self.after.extend([(only, seconds, False)] * count)

    def garble_next(self, count: int, only: str = "") -> None:
        """Act on the next ``count`` requests matching ``only`` but reply with a body that is
        not JSON (an HTML page from a proxy, say), under the real status."""
        with self.lock:
            self.after.extend([(only, 0.0, True)] * count)

    def effect(self, req: Request) -> tuple[float, bool]:
        """The delay and garbling due for a request that was just served."""
        with self.lock:
            for i, (only, delay, garbled) in enumerate(self.after):
                if f"{req.method} {req.path}".startswith(only):
                    del self.after[i]
                    return delay, garbled
        return 0.0, False

    def authorize(self, req: Request) -> Reply | None:
        """None when the request may proceed, else the reply to send."""
        return None

    def dispatch(self, req: Request) -> Reply:
        with self.lock:
            reply = self._dispatch(req)
            self.requests.append((req.method, req.path, reply[0]))
            return reply

    def _dispatch(self, req: Request) -> Reply:
        if self.request_budget is not None and len(self.requests) >= self.request_budget:
            return 400, {"errorMessages": ["request budget of the fake exhausted"]}, {}
        denied = self.authorize(req)
        if denied is not None:
            return denied
        for i, (only, reply) in enumerate(self.failures):
            if f"{req.method} {req.path}".startswith(only):
                del self.failures[i]
                return reply
        for method, pattern, handler in self.routes:
            m = pattern.fullmatch(req.path)
            if m and method == req.method:
                req.match = m
                return handler(req)
        return 404, {"errorMessages": [f"no route {req.method} {req.path}"]}, {}

    def statuses(self, status: int) -> int:
        """How many requests were answered with ``status``."""
        with self.lock:
            return sum(1 for _, _, s in self.requests if s == status)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
