"""The web console at ``/console``: its page and assets (every one served from the package's
``console/`` folder, with :data:`~lakesync.api.headers.CONSOLE_CSP`), the admin sign-in that sets
an HttpOnly session cookie (taken only from the console's own origin, as JSON), the JSON it reads
and its live stream (server-sent events)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import Cookie
from litestar.params import FromPath
from litestar.response import ServerSentEvent, ServerSentEventMessage

from lakesync.api.errors import ERROR_RESPONSES
from lakesync.api.headers import CONSOLE_CSP
from lakesync.api.services.console import (
    SESSION_COOKIE,
    SESSION_TTL_S,
    ConsoleService,
    GatewayDetail,
)
from lakesync.api.services.status import StatusService
from lakesync.console import Point
from lakesync.delta import validate_gateway_id
from lakesync.errors import (
    AuthError,
    ForbiddenError,
    NotFoundError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from lakesync.status import StatusResponse
from lakesync.wire import decode_json_object

__all__ = ["ASSETS_DIR", "ConsoleController"]

ASSETS_DIR = Path(__file__).resolve().parents[1] / "console"
"""The console's page, script, styles and vendored libraries (``scripts/vendor-console.sh``)."""
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_HEADERS = {"content-security-policy": CONSOLE_CSP.decode()}


def _assets() -> dict[str, bytes]:
    """Every asset by its path under :data:`ASSETS_DIR` (read once: a fixed, small set)."""
    return {
        p.relative_to(ASSETS_DIR).as_posix(): p.read_bytes()
        for p in sorted(ASSETS_DIR.rglob("*"))
        if p.is_file() and p.suffix in _TYPES
    }


def _console(request: Request[Any, Any, Any]) -> ConsoleService:
    console: ConsoleService = request.app.state.console
    return console


def _from_the_console(request: Request[Any, Any, Any]) -> None:
    """Refuse a sign-in that another site's page could have sent (login CSRF): a browser says
    where a request comes from in ``Sec-Fetch-Site`` and ``Origin``, and only the console's own
    origin may sign in; a non-browser client sends neither. The body must be JSON, which a page
    elsewhere cannot send without a CORS preflight (the gateway allows none), unlike the
    ``text/plain`` or form bodies of a cross-site "simple" request."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        raise ForbiddenError(f"the console signs in from its own page only (a {site:.20} request)")
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.url.netloc}"
    if origin is not None and origin != own:
        raise ForbiddenError(f"the console signs in from its own page only ({own}), "
                             f"not from {origin:.200}")
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise UnsupportedMediaTypeError("the sign-in body must be JSON (application/json)")


def _signed_in(request: Request[Any, Any, Any]) -> ConsoleService:
    console = _console(request)
    console.check(request.cookies.get(SESSION_COOKIE))
    return console


class ConsoleController(Controller):
    """``/console``: the page, its assets, sign-in and sign-out, and its data."""

    path = "/console"
    include_in_schema = False
    _files: dict[str, bytes] | None = None

    @classmethod
    def _file(cls, name: str) -> bytes:
        if cls._files is None:
            cls._files = _assets()
        body = cls._files.get(name)
        if body is None:
            raise NotFoundError(f"no console asset {name!r}")
        return body

    @get("/", responses=ERROR_RESPONSES)
    async def page(self) -> Response[bytes]:
        """The console's one page (it routes between its views itself)."""
        return Response(self._file("index.html"), media_type=_TYPES[".html"], headers=_HEADERS)

    @get("/assets/{name:path}", responses=ERROR_RESPONSES)
    async def asset(self, name: FromPath[str]) -> Response[bytes]:
        """A script, style sheet or image of the console."""
        name = name.lstrip("/")
        body = self._file(name)
        return Response(body, media_type=_TYPES[Path(name).suffix], headers=_HEADERS)

    @get("/session")
    async def session(self, request: Request[Any, Any, Any]) -> dict[str, bool]:
        """Whether this browser is signed in (always 200, so the page can ask without an
        error)."""
        try:
            _signed_in(request)
        except AuthError:
            return {"signed_in": False}
        return {"signed_in": True}

    @post("/session", status_code=204, responses=ERROR_RESPONSES)
    async def sign_in(self, request: Request[Any, Any, Any]) -> Response[None]:
        """Sign in with an admin token in a JSON body (``{"token": ...}``, never in the URL) sent
        from the console's own origin: sets the session cookie (HttpOnly, SameSite=Strict)."""
        _from_the_console(request)
        token = decode_json_object(await request.body(), "sign-in").get("token")
        if not isinstance(token, str) or not token:
            raise ValidationError("the sign-in body needs a 'token' string")
        session = _console(request).sign_in(token)
        cookie = Cookie(
            SESSION_COOKIE,
            value=session,
            path="/console",
            max_age=int(SESSION_TTL_S),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return Response(None, status_code=204, cookies=[cookie])

    @delete("/session", status_code=204)
    async def sign_out(self, request: Request[Any, Any, Any]) -> Response[None]:
        """Sign out: forget the session and clear its cookie."""
        _console(request).sign_out(request.cookies.get(SESSION_COOKIE))
        gone = Cookie(SESSION_COOKIE, value="", path="/console", max_age=0, httponly=True,
                      samesite="strict")
        return Response(None, status_code=204, cookies=[gone])

    @get("/api/status", responses=ERROR_RESPONSES)
    async def status(self, request: Request[Any, Any, Any]) -> StatusResponse:
        """Every known gateway's status, as ``GET /v1/admin/status?all=true`` shows it."""
        _signed_in(request)
        service: StatusService = request.app.state.status
        return await service.status(await service.known_gateways())

    @get("/api/history", responses=ERROR_RESPONSES)
    async def history(self, request: Request[Any, Any, Any]) -> dict[str, list[Point]]:
        """Each gateway's samples over the last hour, oldest first."""
        return dict(_signed_in(request).history.series())

    @get("/api/gateways/{gw:str}", responses=ERROR_RESPONSES)
    async def gateway(self, request: Request[Any, Any, Any], gw: FromPath[str]) -> GatewayDetail:
        """A gateway's tables (columns, rows) and rules."""
        console = _signed_in(request)
        validate_gateway_id(gw)
        return await console.gateway_detail(gw)

    @get("/api/events", responses=ERROR_RESPONSES)
    async def events(self, request: Request[Any, Any, Any]) -> ServerSentEvent:
        """The live stream: a ``snapshot`` event (status and each gateway's newest sample)
        after every sample the gateway takes."""
        console = _signed_in(request)
        session = request.cookies.get(SESSION_COOKIE)

        async def stream() -> AsyncIterator[ServerSentEventMessage]:
            async for snapshot in console.snapshots(session):
                yield ServerSentEventMessage(
                    data=msgspec.json.encode(snapshot).decode(), event="snapshot"
                )

        return ServerSentEvent(stream(), headers=_HEADERS)
