"""Bearer-token authentication for HTTP and WebSocket handlers (JWT checks live in the core)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.params import FromPath

from lakesync.api.services.sync import SyncService
from lakesync.delta import validate_gateway_id
from lakesync.errors import AuthError, ForbiddenError
from lakesync.tokens import Claims, unverified_claims, verify_token

__all__ = [
    "bearer_token",
    "own_admin_claims",
    "provide_admin_claims",
    "provide_claims",
    "provide_own_admin_claims",
    "provide_service",
    "verified_claims",
]


def bearer_token(headers: Mapping[str, str], query: Mapping[str, Any]) -> str:
    """The token of a request: ``Authorization: Bearer <t>``, else the ``token`` query parameter."""
    header = headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("the Authorization header must be 'Bearer <token>'")
        return token.strip()
    from_query = query.get("token")
    if isinstance(from_query, str) and from_query:
        return from_query
    raise AuthError("missing bearer token (Authorization header or ?token=)")


def verified_claims(token: str, secrets: Sequence[str], gw: str) -> Claims:
    """Check gateway id ``gw``, then verify ``token`` for it (signature, expiry, gateway); an
    ``analyst`` token, which reads only the SQL endpoint, is refused."""
    validate_gateway_id(gw)
    claims = verify_token(token, secrets, gw)
    if claims["role"] == "analyst":
        raise ForbiddenError(
            "an analyst token reads the lake's SQL endpoint (lakesync sql-server), not the "
            "gateway; use a client or admin token here"
        )
    return claims


def own_admin_claims(token: str, secrets: Sequence[str]) -> Claims:
    """Verified claims of an ``admin`` token for the gateway the token names: a route without
    a gateway in its path (``/v1/admin/status``) and the console's sessions."""
    gw = unverified_claims(token)["gw"]  # then verified, signature and all, for that gateway
    return _admin(verified_claims(token, secrets, gw))


def _admin(claims: Claims) -> Claims:
    if claims.get("role") != "admin":
        raise ForbiddenError("this route needs a token with role 'admin'")
    return claims


def authenticate(connection: ASGIConnection[Any, Any, Any, Any], gw: str) -> Claims:
    """Check the path's gateway id ``gw``, then verify the connection's token for it
    (:func:`verified_claims`)."""
    validate_gateway_id(gw)  # a bad id is a 400 on every route, before any token check
    service: SyncService = connection.app.state.service
    token = bearer_token(connection.headers, connection.query_params)
    return verified_claims(token, service.settings.jwt_secrets, gw)


def provide_service(request: Request[Any, Any, Any]) -> SyncService:
    """Dependency: the app's :class:`SyncService`."""
    service: SyncService = request.app.state.service
    return service


def provide_claims(request: Request[Any, Any, Any], gw: FromPath[str]) -> Claims:
    """Dependency: verified claims of a client (or admin) token for the path's gateway."""
    return authenticate(request, gw)


def provide_admin_claims(request: Request[Any, Any, Any], gw: FromPath[str]) -> Claims:
    """Dependency: verified claims of an ``admin`` token for the path's gateway."""
    return _admin(authenticate(request, gw))


def provide_own_admin_claims(request: Request[Any, Any, Any]) -> Claims:
    """Dependency: verified claims of an ``admin`` token, for the gateway the token names (a
    route without a gateway in its path, such as ``/v1/admin/status``)."""
    service: SyncService = request.app.state.service
    token = bearer_token(request.headers, request.query_params)
    return own_admin_claims(token, service.settings.jwt_secrets)
