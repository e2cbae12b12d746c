"""Cross-origin access to the sync API (``/v1/sync/…``) for web apps served elsewhere.

A browser lets a page read a response from another origin only when the response allows that
origin (CORS), and it asks first (a preflight ``OPTIONS``) before any request that carries a
token or a JSON body. The sync API authenticates every request with a bearer token and never
with a cookie, so answering any origin gives a page nothing it does not hold the token for;
``server.cors_origins`` narrows the origins all the same (:class:`OriginPolicy`).

Only the sync routes get CORS headers: the console (whose session is a cookie), the admin
routes, the probes and the docs never do, whatever the setting, so no page elsewhere reads
them. A request from an origin the setting refuses is answered 403 before it is routed (the
browser refuses the preflight of the rest), and the WebSocket handshake checks the same policy
(:mod:`lakesync.api.controllers.ws`). A request without ``Origin`` (any client but a browser)
or from the gateway's own origin is not cross-origin and passes untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from lakesync.api.errors import send_error
from lakesync.errors import ForbiddenError
from lakesync.status import DEAD_LETTERS_HEADER, OUTBOX_HEADER
from lakesync.wire import FEATURES_HEADER

__all__ = [
    "ALLOWED_HEADERS",
    "EXPOSED_HEADERS",
    "MAX_AGE_S",
    "OriginPolicy",
    "cors_middleware",
    "is_sync_path",
]

ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Accept",
    FEATURES_HEADER,
    OUTBOX_HEADER,
    DEAD_LETTERS_HEADER,
    "X-Request-Id",
)
"""The request headers a client of the sync API sends."""

EXPOSED_HEADERS = ("X-Checkpoint-Hlc", "X-Request-Id", "Retry-After")
"""The response headers a client reads beyond those every page may read (``Content-Type``…)."""

MAX_AGE_S = 7200
"""How long a browser may keep a preflight's answer: Chromium's cap (Firefox allows a day)."""

_METHODS = b"GET, POST"
_SYNC_PREFIXES = ("/v1/sync/", "/sync/")


def is_sync_path(path: str) -> bool:
    """Whether ``path`` is a route of the sync API (also its unprefixed form, which redirects)."""
    return path.startswith(_SYNC_PREFIXES)


class OriginPolicy:
    """Which origins may use the sync API: ``server.cors_origins``, ``*`` (in it) for any."""

    def __init__(self, origins: Iterable[str]) -> None:
        listed = list(origins)
        self.any = "*" in listed
        self._origins = frozenset(o.lower() for o in listed if o != "*")

    def allows(self, origin: str) -> bool:
        """Whether a page of ``origin`` (an ``Origin`` header's value) may use the sync API."""
        return self.any or origin.lower() in self._origins

    def refusal(self, headers: Mapping[str, str], scheme: str) -> str | None:
        """Why a request with these ``headers`` (lower-case names) is refused, if it is: it
        comes from a page of an origin this policy does not allow. ``scheme`` is the request's
        (``http``/``https``, or ``ws``/``wss`` for a handshake)."""
        origin = headers.get("origin")
        if origin is None or self.allows(origin) or _own(origin, headers, scheme):
            return None
        return f"origin {origin[:60]!r} is not allowed here (server.cors_origins)"


def _own(origin: str, headers: Mapping[str, str], scheme: str) -> bool:
    """Whether ``origin`` is the gateway's own (a page it serves, such as ``/docs``)."""
    web = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return origin.lower() == f"{web}://{headers.get('host', '')}".lower()


def cors_middleware(app: ASGIApp, policy: OriginPolicy) -> ASGIApp:
    """Answer the preflights of the sync API, add the CORS headers to its responses (errors
    included, so a page reads the error body) for the origins ``policy`` allows, and refuse
    the requests of other origins with 403 before they are routed."""
    vary = (b"vary", b"Origin")

    def allow_origin(origin: bytes) -> tuple[bytes, bytes]:
        return (b"access-control-allow-origin", b"*" if policy.any else origin)

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_sync_path(scope["path"]):  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is None or _own(origin, headers, scope["scheme"]):
            await app(scope, receive, send)
            return
        refused = policy.refusal(headers, scope["scheme"])
        if refused is not None:
            await send_error(scope, send, ForbiddenError(refused), [vary])
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await send({
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    allow_origin(origin.encode("latin-1")),
                    (b"access-control-allow-methods", _METHODS),
                    (b"access-control-allow-headers", ", ".join(ALLOWED_HEADERS).encode()),
                    (b"access-control-max-age", str(MAX_AGE_S).encode()),
                    vary,
                ],
            })
            await send({"type": "http.response.body", "body": b""})
            return
        added = [
            allow_origin(origin.encode("latin-1")),
            (b"access-control-expose-headers", ", ".join(EXPOSED_HEADERS).encode()),
            vary,
        ]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await app(scope, receive, send_with_cors)

    return middleware
