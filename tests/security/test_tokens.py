"""JWT tokens (docs/protocol.md §7): mint/verify, expiry, forgery, gateway binding, rotation,
roles."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.delta import validate_row_id
from lakesync.errors import AuthError, ForbiddenError, ValidationError
from lakesync.tokens import (
    ROLES,
    mint_client_token,
    mint_token,
    parse_ttl,
    unverified_claims,
    verify_token,
)

SECRET = "primary-secret-long-enough-for-every-hmac-algorithm-0123456789abcdef"
OLD = "previous-secret-with-enough-bytes-for-hs256"


def test_mint_and_verify() -> None:
    token = mint_token(SECRET, "client-1", "gw1", claims={"team": "a", "orgs": ["x", "y"]})
    claims = verify_token(token, [SECRET], "gw1")
    assert claims == {
        "sub": "client-1",
        "gw": "gw1",
        "role": "client",
        "team": "a",
        "orgs": ["x", "y"],
    }


def test_admin_role() -> None:
    token = mint_token(SECRET, "ops", "gw1", role="admin")
    assert verify_token(token, [SECRET], "gw1")["role"] == "admin"


def test_ttl_sets_exp() -> None:
    token = mint_token(SECRET, "c", "gw1", ttl_s=120, now=1_000_000)
    payload = jwt.decode(token, options={"verify_signature": False})
    assert payload["iat"] == 1_000_000
    assert payload["exp"] == 1_000_120


def test_expired_token() -> None:
    token = mint_token(SECRET, "c", "gw1", ttl_s=60, now=time.time() - 3600)
    with pytest.raises(AuthError, match="expired") as info:
        verify_token(token, [SECRET], "gw1")
    assert info.value.status == 401


def test_forged_signature() -> None:
    token = mint_token("attacker-secret-with-enough-bytes-hs256", "c", "gw1")
    with pytest.raises(AuthError, match="signature"):
        verify_token(token, [SECRET, OLD], "gw1")


def test_tampered_payload() -> None:
    header, _, sig = mint_token(SECRET, "c", "gw1").split(".")
    other = mint_token(SECRET, "admin", "gw1", role="admin").split(".")[1]
    with pytest.raises(AuthError):
        verify_token(f"{header}.{other}.{sig}", [SECRET], "gw1")


def test_wrong_gateway_is_forbidden() -> None:
    token = mint_token(SECRET, "c", "gw1")
    with pytest.raises(ForbiddenError, match="gw1") as info:
        verify_token(token, [SECRET], "gw2")
    assert info.value.status == 403


def test_previous_secret_is_accepted() -> None:
    token = mint_token(OLD, "c", "gw1")
    assert verify_token(token, [SECRET, OLD], "gw1")["sub"] == "c"
    with pytest.raises(AuthError):
        verify_token(token, [SECRET], "gw1")


def test_a_verified_token_is_refused_once_it_expires() -> None:
    # Verified once while valid (and remembered), then refused as expired, not served from memory.
    token = mint_token(SECRET, "c", "gw1", ttl_s=2, now=time.time() - 1)
    assert verify_token(token, [SECRET], "gw1")["sub"] == "c"
    time.sleep(1.2)
    with pytest.raises(AuthError, match="expired"):
        verify_token(token, [SECRET], "gw1")


def test_a_remembered_token_still_answers_to_its_gateway_and_secrets() -> None:
    token = mint_token(OLD, "c", "gw1", claims={"team": "a"})
    first = verify_token(token, [SECRET, OLD], "gw1")
    first["team"] = "changed by a caller"
    assert verify_token(token, [SECRET, OLD], "gw1") == {
        "sub": "c", "gw": "gw1", "role": "client", "team": "a"
    }
    with pytest.raises(ForbiddenError):
        verify_token(token, [SECRET, OLD], "gw2")
    with pytest.raises(AuthError, match="signature"):
        verify_token(token, [SECRET], "gw1")  # the old secret was retired


def _raw(payload: dict[str, Any], secret: str = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(payload, secret, algorithm=alg)


@pytest.mark.parametrize(
    ("token", "needle"),
    [
        (_raw({"sub": "c", "gw": "gw1"}), "exp"),
        (_raw({"gw": "gw1", "exp": int(time.time()) + 86400}), "sub"),
        (_raw({"sub": "c", "exp": int(time.time()) + 86400}), "gw"),
        (_raw({"sub": "", "gw": "gw1", "exp": int(time.time()) + 86400}), "sub"),
        (_raw({"sub": "c", "gw": "gw1", "exp": int(time.time()) + 86400, "role": "root"}), "role"),
        (_raw({"sub": "c", "gw": "gw1", "exp": int(time.time()) + 86400}, alg="HS512"), "alg"),
        pytest.param(
            jwt.encode(
                {"sub": "c", "gw": "gw1", "exp": int(time.time()) + 86400}, None, algorithm="none"
            ),
            "token",
            id="unsigned-token",  # a stable id: xdist workers must collect the same names
        ),
        ("not.a.jwt", "token"),
        ("", "missing"),
    ],
)
def test_bad_tokens_are_auth_errors(token: str, needle: str) -> None:
    with pytest.raises(AuthError) as info:
        verify_token(token, [SECRET], "gw1")
    assert type(info.value) is AuthError
    assert needle in info.value.message


_EXP = int(time.time()) + 86400


def _signed(payload: dict[str, Any]) -> str:
    """An HS256 token over any JSON payload (PyJWT's encoder refuses some claim types)."""
    return jwt.api_jws.encode(json.dumps(payload).encode(), SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"role": ["admin"]}, "role"),
        ({"role": {"admin": True}}, "role"),
        ({"role": None}, "role"),
        ({"role": 1}, "role"),
        ({"sub": ["c"]}, "(?i)sub"),
        ({"sub": "c\x00"}, "NUL"),
        ({"sub": "c\ud800"}, "surrogate"),
        ({"sub": "c" * 1025}, "sub"),
        ({"gw": ["gw1"]}, "gw"),
    ],
)
def test_malformed_claims_of_a_signed_token_are_auth_errors(
    payload: dict[str, Any], needle: str
) -> None:
    # Validly signed, so only the claim checks stand between these and a 500.
    token = _signed({"sub": "c", "gw": "gw1", "exp": _EXP, **payload})
    with pytest.raises(AuthError, match=needle) as info:
        verify_token(token, [SECRET], "gw1")
    assert type(info.value) is AuthError


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    overrides=st.dictionaries(
        st.sampled_from(["sub", "gw", "role", "exp", "iat", "nbf", "aud", "iss", "team"]),
        _JSON,
        max_size=4,
    )
)
def test_any_signed_payload_verifies_or_is_an_auth_error(overrides: dict[str, Any]) -> None:
    """Whatever a signed payload holds, verification answers claims fit for the gateway (a
    storable ``sub``, a known role) or an :class:`AuthError`/:class:`ForbiddenError`."""
    token = _signed({"sub": "c", "gw": "gw1", "exp": _EXP, **overrides})
    try:
        claims = verify_token(token, [SECRET], "gw1")
    except (AuthError, ForbiddenError):
        return
    assert claims["role"] in ROLES and claims["gw"] == "gw1"
    assert validate_row_id(claims["sub"]) == claims["sub"]


def test_no_configured_secret_is_an_auth_error() -> None:
    with pytest.raises(AuthError, match="secret"):
        verify_token(mint_token(SECRET, "c", "gw1"), [], "gw1")


def test_non_string_claims_are_dropped() -> None:
    token = _raw(
        {"sub": "c", "gw": "gw1", "exp": int(time.time()) + 86400, "n": 5, "l": [1], "ok": "y"}
    )
    assert verify_token(token, [SECRET], "gw1") == {
        "sub": "c",
        "gw": "gw1",
        "role": "client",
        "ok": "y",
    }


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"secret": ""}, "LAKESYNC_JWT_SECRET"),
        ({"sub": ""}, "sub"),
        ({"gw": ""}, "invalid gateway id"),
        ({"gw": "g" * 65}, "invalid gateway id"),
        ({"gw": "gw/../x"}, "invalid gateway id"),
        ({"role": "root"}, "role"),
        ({"claims": {"exp": "1"}}, "reserved"),
        ({"claims": {"sub": "other"}}, "reserved"),
    ],
)
def test_mint_rejects(kwargs: dict[str, Any], needle: str) -> None:
    args: dict[str, Any] = {"secret": SECRET, "sub": "c", "gw": "gw1", **kwargs}
    with pytest.raises(ValidationError, match=needle):
        mint_token(**args)


def test_unverified_claims() -> None:
    token = mint_token(SECRET, "c", "gw1", claims={"team": "a"})
    assert unverified_claims(token) == {"sub": "c", "gw": "gw1", "role": "client", "team": "a"}
    with pytest.raises(AuthError):
        unverified_claims("garbage")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("30s", 30), ("15m", 900), ("1h", 3600), ("7d", 604_800), (" 2H ", 7200)],
)
def test_parse_ttl(text: str, seconds: int) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0h", "1w", "-1h", "h", "1.5h", "one hour"])
def test_parse_ttl_rejects(text: str) -> None:
    with pytest.raises(ValidationError, match="duration"):
        parse_ttl(text)


def test_mint_client_token_is_what_the_gateway_accepts() -> None:
    tok = mint_client_token(SECRET, "user-42", "shop", {"team": "blue", "tags": ("a", "b")}, "8h")
    claims = verify_token(tok, [SECRET], "shop")
    assert claims == {"sub": "user-42", "gw": "shop", "role": "client", "team": "blue",
                      "tags": ["a", "b"]}
    exp = jwt.decode(tok, SECRET, algorithms=["HS256"])["exp"]
    assert abs(exp - (time.time() + 8 * 3600)) < 5
    assert verify_token(mint_client_token(SECRET, "u", "shop", ttl=60), [SECRET], "shop")


@pytest.mark.parametrize(
    ("client_id", "claims", "ttl", "needle"),
    [
        ("", None, "1h", "client id"),
        ("a\x00b", None, "1h", "NUL"),
        ("lakesync-gateway-7", None, "1h", "reserved for gateways"),
        ("u", {"team": 3}, "1h", "claim 'team'"),
        ("u", {"sub": "x"}, "1h", "reserved"),
        ("u", None, 0, "ttl"),
        ("u", None, "soon", "invalid duration"),
    ],
)
def test_mint_client_token_refuses_what_the_gateway_would(
    client_id: str, claims: Any, ttl: Any, needle: str
) -> None:
    # Refused at minting, not later by the gateway with a 401 the app's user cannot act on.
    with pytest.raises(ValidationError, match=needle):
        mint_client_token(SECRET, client_id, "shop", claims, ttl)
