"""Structured (JSON lines) logs with the current request id on every line, credentials masked."""

from __future__ import annotations

import contextvars
import json
import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from lakesync.lakehouse.catalog import issued_tokens
from lakesync.redaction import Redactor

__all__ = [
    "REQUEST_ID",
    "JsonFormatter",
    "RedactingFilter",
    "configure_logging",
    "request_id_middleware",
]

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
log = logging.getLogger("lakesync.gateway")

_EXTRAS = ("method", "path", "status", "ms")


class RedactingFilter(logging.Filter):
    """Mask credentials in a record (message, traceback, extras) before any handler formats it,
    with one :class:`~lakesync.redaction.Redactor` of the process's known ``secrets`` (its JWT
    secrets, resolved references, ...) and credential ``identifiers`` (an S3 access key id),
    to which it adds the tokens REST catalogs issue the process as they come
    (:func:`~lakesync.lakehouse.catalog.issued_tokens`: in no setting, and a catalog's error may
    quote one)."""

    def __init__(self, secrets: Iterable[str] = (), identifiers: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets, self._identifiers = list(secrets), list(identifiers)
        self._issued: frozenset[str] = frozenset()
        self._redact = Redactor(self._secrets, self._identifiers)

    def _redactor(self) -> Redactor:
        issued = issued_tokens()
        if issued != self._issued:
            self._issued = issued
            self._redact = Redactor([*self._secrets, *issued], self._identifiers)
        return self._redact

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place (the message is rendered once); never drops it."""
        redact = self._redactor()
        try:
            message = record.getMessage()
        except Exception:  # a bad format string still gets logged, masked
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key in _EXTRAS:
            value = getattr(record, key, None)
            if isinstance(value, str):
                setattr(record, key, redact(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id and extras."""

    def format(self, record: logging.LogRecord) -> str:
        """Render a record as JSON."""
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": REQUEST_ID.get(),
        }
        for key in _EXTRAS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info or record.exc_text:
            out["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str)


def configure_logging(
    level: str = "INFO", secrets: Iterable[str] = (), identifiers: Iterable[str] = ()
) -> None:
    """Send every log line of the process (gateway and uvicorn) to stderr as JSON, through one
    :class:`RedactingFilter` (with the process's known ``secrets`` and credential
    ``identifiers``) so no credential is logged."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter(secrets, identifiers))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    """Give each HTTP request an id (``X-Request-Id`` in, or a new one), echo it on the response
    and log one access line when it completes."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if 0 < len(incoming) <= 128 else uuid.uuid4().hex
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                },
            )
            REQUEST_ID.reset(token)

    return middleware
