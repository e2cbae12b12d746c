"""Security headers on every HTTP response: routes, probes, docs and error replies alike."""

from __future__ import annotations

from litestar.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONSOLE_CSP", "DOCS_CSP", "SECURITY_HEADERS", "security_headers_middleware"]

SECURITY_HEADERS: dict[bytes, bytes] = {
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"no-referrer",
    # JSON and text need nothing from a browser: no scripts, no frames, no embedding.
    b"content-security-policy": b"default-src 'none'; frame-ancestors 'none'",
    b"cache-control": b"no-store",
}
"""Headers every response gets unless its route set them."""

DOCS_CSP = (
    b"default-src 'none'; script-src 'unsafe-inline' https://cdn.jsdelivr.net; "
    b"style-src 'unsafe-inline' https://cdn.jsdelivr.net; img-src data: https://cdn.jsdelivr.net; "
    b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
"""The policy of the one HTML page, Swagger UI at ``/docs``: its pinned CDN assets, its inline
bootstrap script, and requests to this gateway only."""


CONSOLE_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
"""The policy of the web console at ``/console``: its scripts, styles and data from this
gateway only (every asset is served here, nothing inline)."""


def security_headers_middleware(app: ASGIApp) -> ASGIApp:
    """Add :data:`SECURITY_HEADERS` to every HTTP response (:data:`DOCS_CSP` as the policy of
    HTML responses), keeping any header the route set itself."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {bytes(name).lower(): bytes(value) for name, value in headers}
                html = present.get(b"content-type", b"").startswith(b"text/html")
                for name, value in SECURITY_HEADERS.items():
                    if name not in present:
                        docs = html and name == b"content-security-policy"
                        headers.append((name, DOCS_CSP if docs else value))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_headers)

    return middleware
