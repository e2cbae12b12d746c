"""The one place exceptions become HTTP replies: ``{"error": message, "code": CODE}``
(docs/protocol.md §5)."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import msgspec
import psycopg
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Scope, Send

from lakesync.api.logs import REQUEST_ID
from lakesync.errors import (
    LakeSyncError,
    RateLimitedError,
    StoreUnavailableError,
    code_for_status,
    first_line,
    is_store_outage,
)
from lakesync.lakehouse.catalog import sql_catalog_failure
from lakesync.values import MAX_VALUE_DEPTH
from lakesync.wire import ErrorBody

__all__ = ["ERROR_RESPONSES", "client_message", "exception_handlers", "send_error"]

log = logging.getLogger("lakesync.gateway")

_SUMMARIES = {
    "DESTINATION_ERROR": "a destination the gateway reads could not be read",
    "OBJECT_STORE_ERROR": "the lake's object store could not be reached or refused the lake's "
    "credentials",
    "CATALOG_ERROR": "the lake's catalog could not be reached or refused the lake's credentials",
}
"""What a client is told of a failure behind the gateway, by code (else "internal error")."""


def client_message(exc: LakeSyncError) -> str:
    """What a client is told of ``exc``. Its own message, except for failures of the gateway or
    what stands behind it (5xx other than 503): their messages name hosts, users, databases
    and drivers' errors, so they are logged (redacted, under the request id) and the client
    gets a short summary of the code."""
    if exc.status < 500 or exc.status == 503:
        return exc.message
    log.error("%s: %s", exc.code, exc.message)
    summary = _SUMMARIES.get(exc.code, "internal error")
    return f"{summary}; the gateway log has the details under this request id"


def _body(app: Any, message: str, code: str) -> dict[str, str]:
    """An error body (docs/protocol.md §5), counted on ``/metrics`` by code."""
    metrics = getattr(app.state, "metrics", None)
    if metrics is not None:
        metrics.errors.labels(code).inc()
    return {"error": message, "code": code, "requestId": REQUEST_ID.get()}


def _reply(
    request: Request[Any, Any, Any],
    status: int,
    message: str,
    code: str,
    headers: dict[str, str] | None = None,
) -> Response[dict[str, str]]:
    return Response(
        _body(request.app, message, code),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


async def send_error(
    scope: Scope, send: Send, exc: LakeSyncError, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer ``exc`` from ASGI middleware, before any route runs, with ``headers`` added: the
    same reply its exception handler gives a route's error."""
    body = msgspec.json.encode(_body(scope["litestar_app"], client_message(exc), exc.code))
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": exc.status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)


def _lakesync_error(request: Request[Any, Any, Any], exc: LakeSyncError) -> Response[Any]:
    if isinstance(exc, StoreUnavailableError) and isinstance(exc.__cause__, Exception):
        return _store_unavailable(request, exc.__cause__)
    headers = None
    if isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(max(1, round(exc.retry_after + 0.499)))}
    return _reply(request, exc.status, client_message(exc), exc.code, headers)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    message = str(exc.detail)
    if isinstance(exc, ValidationException) and exc.extra:
        message = f"{message}: {exc.extra}"
    if status >= 500:
        log.error("internal error: %s", message)
        return _reply(request, status, "internal error", "INTERNAL_ERROR")
    return _reply(
        request,
        status,
        message,
        code_for_status(status, "VALIDATION_ERROR"),
        dict(exc.headers or {}) or None,
    )


def _too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    # A body too deep for msgspec to decode at all. Column values that do decode are refused at
    # validation beyond lakesync.values.MAX_VALUE_DEPTH, far below any recursion limit, so no
    # value stored under that rule can recurse this deep when it is served.
    return _reply(
        request,
        400,
        f"input is nested too deeply (column values nest at most {MAX_VALUE_DEPTH} levels)",
        "VALIDATION_ERROR",
    )


def _store_unavailable(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    # An unreachable or exhausted store is an outage, not a bug: clients retry a 503. One line
    # (the driver's first), no traceback: an outage answers many requests.
    log.error("hot-log store unavailable: %s", first_line(exc))
    return _reply(
        request,
        503,
        "the hot-log store is unavailable; retry shortly",
        "BACKPRESSURE_ERROR",
        {"Retry-After": "1"},
    )


def _store_error(request: Request[Any, Any, Any], exc: psycopg.Error) -> Response[Any]:
    # The store's own errors: an outage (a connection lost, a server restarting, a timeout, a
    # session the server ended) is a 503; any other is a bug.
    if is_store_outage(exc):
        return _store_unavailable(request, exc)
    return _internal_error(request, exc)


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    catalog = sql_catalog_failure(exc, "")  # a route that reached the lake's catalog database
    if catalog is not None:
        return _lakesync_error(request, catalog)
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _reply(request, 500, "internal error", "INTERNAL_ERROR")


exception_handlers: dict[type[Exception] | int, Any] = {
    LakeSyncError: _lakesync_error,
    HTTPException: _http_error,
    RecursionError: _too_deep,
    psycopg.Error: _store_error,
    sqlite3.OperationalError: _store_unavailable,
    Exception: _internal_error,
}

ERROR_RESPONSES: dict[int, ResponseSpec] = {
    status: ResponseSpec(data_container=ErrorBody, description=description)
    for status, description in {
        400: "VALIDATION_ERROR: malformed input",
        401: "AUTH_ERROR: missing, forged or expired token",
        403: "FORBIDDEN / AUTH_ERROR: wrong gateway, clientId not the token's sub, no access",
        404: "NOT_FOUND",
        405: "VALIDATION_ERROR: method not allowed",
        409: "CLOCK_DRIFT: a delta HLC too far ahead",
        413: "VALIDATION_ERROR: body over 1 MiB",
        422: "SCHEMA_ERROR: bad identifier, unknown column, wrong type, deltaId mismatch",
        429: "RATE_LIMITED (Retry-After)",
        503: "BACKPRESSURE_ERROR",
    }.items()
}
"""OpenAPI documentation of every error reply a route may give."""
