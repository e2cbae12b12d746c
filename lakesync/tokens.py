"""JWT tokens (docs/protocol.md §7): HS256, ``sub``/``gw``/``exp`` required, roles, secret
rotation."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import jwt

from lakesync.delta import validate_gateway_id, validate_row_id
from lakesync.errors import AuthError, ForbiddenError, ValidationError

__all__ = ["ROLES", "Claims", "mint_token", "parse_ttl", "unverified_claims", "verify_token"]

ROLES = frozenset({"client", "admin"})
_RESERVED = frozenset({"sub", "gw", "exp", "iat", "nbf", "role"})
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

Claims = dict[str, Any]
"""Verified claims: ``sub``, ``gw``, ``role`` and the string / string-array claims for rules."""


def parse_ttl(text: str) -> int:
    """Parse a duration such as ``90``, ``30s``, ``15m``, ``1h`` or ``7d`` into seconds."""
    t = text.strip().lower()
    unit = _TTL_UNITS.get(t[-1:])
    number = t[:-1] if unit else t
    if not number.isdigit() or int(number) <= 0:
        raise ValidationError(f"invalid duration {text!r}; use e.g. 30s, 15m, 1h or 7d")
    return int(number) * (unit or 1)


def mint_token(
    secret: str,
    sub: str,
    gw: str,
    role: str = "client",
    claims: Mapping[str, str | list[str]] | None = None,
    ttl_s: int = 3600,
    now: float | None = None,
) -> str:
    """Sign an HS256 token for client ``sub`` on gateway ``gw``, valid for ``ttl_s`` seconds."""
    if not secret:
        raise ValidationError("no JWT secret configured; set LAKESYNC_JWT_SECRET")
    if not sub:
        raise ValidationError("a token needs a non-empty sub")
    validate_gateway_id(gw)
    if role not in ROLES:
        raise ValidationError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    issued = int(time.time() if now is None else now)
    payload: dict[str, Any] = {}
    for key, value in (claims or {}).items():
        if key in _RESERVED:
            raise ValidationError(f"claim {key!r} is reserved; use --sub/--gw/--role/--ttl")
        payload[key] = value
    payload.update(sub=sub, gw=gw, role=role, iat=issued, exp=issued + ttl_s)
    return jwt.encode(payload, secret, algorithm="HS256")


def _check_claims(payload: Mapping[str, Any]) -> Claims:
    sub, gw, role = payload.get("sub"), payload.get("gw"), payload.get("role", "client")
    try:
        # ``sub`` is the client id: stored and sent as text, so it must be storable text.
        validate_row_id(sub, "token claim 'sub'")
    except ValidationError as exc:
        raise AuthError(exc.message) from None
    if not isinstance(gw, str) or not gw:
        raise AuthError("token claim 'gw' must be a non-empty string")
    if not isinstance(role, str) or role not in ROLES:
        raise AuthError(f"token claim 'role' must be 'client' or 'admin', got {role!r:.80}")
    claims: Claims = {"sub": sub, "gw": gw, "role": role}
    for key, value in payload.items():
        if key in _RESERVED:
            continue
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            claims[key] = value
    return claims


def verify_token(token: str, secrets: Sequence[str], gw: str) -> Claims:
    """Verify a token against the primary and previous secrets and the path's gateway id.

    Raises :class:`AuthError` for a missing, malformed, forged or expired token and
    :class:`ForbiddenError` for a valid token issued for another gateway.
    """
    if not token:
        raise AuthError("missing bearer token")
    if not secrets:
        raise AuthError("the gateway has no JWT secret configured")
    payload: dict[str, Any] | None = None
    for secret in secrets:
        try:
            payload = jwt.decode(
                token,
                secret,
                algorithms=["HS256"],
                options={"require": ["exp", "sub", "gw"]},
                leeway=0,
            )
            break
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired; request a new one") from None
        except jwt.InvalidSignatureError:
            continue
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token is missing the required claim {exc.claim!r}") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {exc}") from None
    if payload is None:
        raise AuthError("invalid token signature")
    claims = _check_claims(payload)
    if claims["gw"] != gw:
        raise ForbiddenError(f"token is for gateway {claims['gw']!r}, not {gw!r}")
    return claims


def unverified_claims(token: str) -> Claims:
    """Read a token's claims without checking the signature (clients learn their ``sub``)."""
    try:
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise AuthError(f"malformed token: {exc}") from None
    return _check_claims(payload)
