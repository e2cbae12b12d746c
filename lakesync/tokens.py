"""JWT tokens (docs/protocol.md §7): HS256, ``sub``/``gw``/``exp`` required, roles, secret
rotation.

PyJWT is imported where a token is minted or read: it loads ``cryptography`` (a tenth of a
second), which every CLI command (``lakesync query`` too) would otherwise pay at start.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.delta import is_reserved_client, validate_gateway_id, validate_row_id
from lakesync.errors import AuthError, ForbiddenError, ValidationError

__all__ = [
    "MIN_SECRET_BYTES",
    "ROLES",
    "Claims",
    "mint_client_token",
    "mint_token",
    "parse_ttl",
    "unverified_claims",
    "verify_token",
    "weak_secret",
]

ROLES = frozenset({"client", "admin", "analyst"})
"""``client``: syncs through the gateway; ``admin``: the admin API and console too;
``analyst``: reads the lake's analytics through the SQL endpoint (``lakesync sql-server``),
nothing else: the gateway refuses it on every route."""
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
    import jwt  # noqa: PLC0415  # late: see the module docstring

    _quiet_key_length(jwt)
    return jwt.encode(payload, secret, algorithm="HS256")


MIN_SECRET_BYTES = 32
"""The shortest JWT secret HS256 is safe with (RFC 7518 §3.2: a key as long as the hash)."""


def weak_secret(secret: str) -> str | None:
    """One line saying ``secret`` is too short for HS256 and how to make a good one; None when
    it is long enough. The gateway and ``lakesync token`` print it, instead of PyJWT's warning
    with its source lines."""
    size = len(secret.encode())
    if size >= MIN_SECRET_BYTES:
        return None
    return (
        f"the JWT secret is {size} bytes, shorter than the {MIN_SECRET_BYTES} HS256 needs to be "
        "safe; make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    )


def _quiet_key_length(jwt: Any) -> None:
    """Silence PyJWT's key-length warning (:func:`weak_secret` says it once, in one line)."""
    warnings.filterwarnings("ignore", category=jwt.InsecureKeyLengthWarning)


def mint_client_token(
    secret: str,
    client_id: str,
    gateway: str,
    claims: Mapping[str, str | Sequence[str]] | None = None,
    ttl: int | str = "1h",
    *,
    role: str = "client",
    now: float | None = None,
) -> str:
    """Mint the token an app's backend hands to one of its signed-in users' clients.

    ``secret`` is the gateway's JWT secret (``LAKESYNC_JWT_SECRET``; keep it on the backend),
    ``client_id`` the client's id (the token's ``sub``: its pushes must carry it), ``gateway``
    the gateway id, ``claims`` what its sync rules read (``jwt:team`` reads ``claims["team"]``; a
    list is an array claim), ``ttl`` the lifetime in seconds or as ``"30m"``, ``"1h"``, ``"7d"``.
    Everything the gateway would refuse later is refused here with a
    :class:`~lakesync.errors.ValidationError`: a client id it cannot store or that is reserved
    for gateways, a bad gateway id, role, claim or lifetime. ``lakesync token`` mints with it.
    For example ``mint_client_token(os.environ["LAKESYNC_JWT_SECRET"], "user-42", "shop",
    {"team": "blue"}, "8h")``.
    """
    validate_row_id(client_id, "client id")
    if is_reserved_client(client_id):
        raise ValidationError(f"client id {client_id!r} is reserved for gateways; use another")
    ttl_s = parse_ttl(ttl) if isinstance(ttl, str) else ttl
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
        raise ValidationError(f"ttl must be a positive number of seconds, got {ttl!r}")
    checked: dict[str, str | list[str]] = {}
    for key, value in (claims or {}).items():
        if isinstance(value, str):
            checked[key] = value
        elif not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise ValidationError(f"claim {key!r} must be a string or a list of strings")
        else:
            checked[key] = list(value)
    return mint_token(secret, client_id, gateway, role, checked, ttl_s, now)


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
        raise AuthError(
            f"token claim 'role' must be one of {sorted(ROLES)}, got {role!r:.80}"
        )
    claims: Claims = {"sub": sub, "gw": gw, "role": role}
    for key, value in payload.items():
        if key in _RESERVED:
            continue
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            claims[key] = value
    return claims


_VERIFIED_MAX = 4096
"""Verified tokens remembered at most (the table is emptied when full)."""

_verified: dict[tuple[str, tuple[str, ...]], tuple[Claims, float]] = {}
"""Claims and expiry of tokens already verified, by token and the secrets that verified it: a
client sends the same token on every request, and checking its signature again cost about 5% of
a push's CPU. Only its expiry changes with time: an expired one is verified (and refused) again,
and a secret taken out of the configured ones no longer finds what it verified."""


def verify_token(token: str, secrets: Sequence[str], gw: str) -> Claims:
    """Verify a token against the primary and previous secrets and the path's gateway id.

    Raises :class:`AuthError` for a missing, malformed, forged or expired token and
    :class:`ForbiddenError` for a valid token issued for another gateway.
    """
    if not token:
        raise AuthError("missing bearer token")
    if not secrets:
        raise AuthError("the gateway has no JWT secret configured")
    key = (token, tuple(secrets))
    known = _verified.get(key)
    if known is not None and time.time() < known[1]:
        claims = dict(known[0])
    else:
        claims = _verify_signed(token, secrets)
        expires = float(claims.pop("exp"))
        if len(_verified) >= _VERIFIED_MAX:
            _verified.clear()
        _verified[key] = (dict(claims), expires)
    if claims["gw"] != gw:
        raise ForbiddenError(f"token is for gateway {claims['gw']!r}, not {gw!r}")
    return claims


def _verify_signed(token: str, secrets: Sequence[str]) -> Claims:
    """A token's claims once its signature, expiry and claims are checked, with its ``exp``
    (which the claims leave out) under that key."""
    import jwt  # noqa: PLC0415  # late: see the module docstring

    _quiet_key_length(jwt)
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
    return _check_claims(payload) | {"exp": payload["exp"]}


def unverified_claims(token: str) -> Claims:
    """Read a token's claims without checking the signature (clients learn their ``sub``)."""
    import jwt  # noqa: PLC0415  # late: see the module docstring

    try:
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise AuthError(f"malformed token: {exc}") from None
    return _check_claims(payload)

