"""What every output shows of a credential: nothing (pure, no I/O).

One redaction for every shape a secret takes in text the project prints, logs or answers:

- a URL's userinfo password: ``postgresql://u:pw@host`` → ``postgresql://u:***@host``;
- the value of a secret-looking key, wherever it is written: a query string
  (``?password=…``, ``&sslpassword=…``), libpq key=value (``password=…``, ``password='x y'``),
  JDBC (``;password=…``), JSON and reprs (``"token": "…"``, ``'api_key': '…'``);
- JWTs and ``Bearer`` / ``Basic`` / ``Digest`` credentials;
- the values the process resolved for ``${VAR}`` / ``${file:PATH}`` references
  (:mod:`lakesync.secrets`) and its other known secrets, wherever they appear
  (:class:`Redactor`).

A ``${…}`` reference itself is kept: it names where the secret lives, not the secret. Every
masked value becomes :data:`MASK`, and redacting redacted text changes nothing, so an output
may pass through more than one redacting layer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MASK", "MIN_IDENTIFIER", "MIN_SECRET", "Redactor", "redact", "redact_strings"]

MASK = "***"
"""What a masked credential shows."""
MIN_SECRET = 8
"""The length from which a known secret is masked wherever it appears (a shorter one would mask
ordinary words; the patterns of :func:`redact` still mask it in a URL or after a key)."""
MIN_IDENTIFIER = 16
"""The length from which a credential identifier (an S3 access key id) is masked."""

_REFERENCE = r"\$\{[^}]*\}"
_SECRET_KEY = (
    r"[\w.-]*(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credential|signature|authorization|cookie)[\w.-]*"
)
_JWT = re.compile(r"\beyJ[\w-]*\.[\w-]*\.[\w-]*")
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic|digest)\s+(?!tokens?\b)[\w.~+/=-]+")
# ``key=value`` anywhere; ``key: value`` only with a quoted key or value (JSON, reprs), since
# prose such as "invalid token: ..." has the same shape. An auth scheme's credential is masked
# on its own; a value that is a reference or already masked is kept (:func:`_mask_value`).
_KEY_VALUE = re.compile(
    rf"(?i)(?P<key>{_SECRET_KEY})"
    r"(?P<sep>['\"]?\s*=\s*|['\"]\s*:\s*|\s*:\s*(?=['\"]))"
    r"(?!(?:bearer|basic|digest)\s)"
    r"(?:(?P<quote>[\"'])(?P<quoted>(?:\\.|(?!(?P=quote)).)*)(?P=quote)"
    rf"|(?P<bare>(?:{_REFERENCE}|\{{[^}}]*\}}|[^\s&,;'\"}}\])])+))"
)
# The password of a URL's userinfo: up to the last ``@`` before a ``/``, as URL parsers read it
# (a password may hold an unencoded ``@``, ``?`` or ``#``; a reference any character but ``}``).
_URL_PASSWORD = re.compile(
    rf"(?i)\b(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*):(?P<password>(?:{_REFERENCE}|[^\s/])*)@"
)
_WHOLE_REFERENCE = re.compile(rf"(?:{_REFERENCE})+")


def _kept(value: str) -> bool:
    return value == MASK or _WHOLE_REFERENCE.fullmatch(value) is not None


def _mask_value(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    value = match["bare"] if match["quoted"] is None else match["quoted"]
    shown = value if _kept(value) else MASK
    return f"{match['key']}{match['sep']}{quote}{shown}{quote}"


def _mask_password(match: re.Match[str]) -> str:
    password = match["password"]
    shown = password if _kept(password) else MASK
    return f"{match['head']}:{shown}@"


def redact(text: str) -> str:
    """``text`` with every credential of a recognisable shape replaced by :data:`MASK`: URL
    passwords, the values of secret-looking keys (``password=``, ``sslpassword=``,
    ``;password=``, ``"token": …``, quoted or not), JWTs and ``Bearer``/``Basic`` credentials.
    ``${…}`` references are kept."""
    text = _AUTH_SCHEME.sub(rf"\1 {MASK}", text)
    text = _JWT.sub(MASK, text)
    text = _KEY_VALUE.sub(_mask_value, text)
    return _URL_PASSWORD.sub(_mask_password, text)


class Redactor:
    """:func:`redact` plus what this process knows: its literal ``secrets`` (JWT secrets, the
    values its ``${…}`` references resolved to, ...) masked wherever they appear, and its
    credential ``identifiers`` (an S3 access key id) masked as whole words. Build it once and
    call it on each text."""

    def __init__(self, secrets: Iterable[str] = (), identifiers: Iterable[str] = ()) -> None:
        # Each also as redact() shows it: a message may quote a secret DSN with its password
        # already masked. Longest first, so a secret containing another is masked whole.
        forms = {form for s in secrets for form in (s, redact(s))}
        known = sorted({s for s in forms if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, known))) if known else None
        # A key id is no secret, but names an account: masked when it is one of a real
        # provider's (AWS: 20 characters), never a short made-up one such as a local server's
        # "lakesync", which would mask module names and paths.
        words = sorted({i for i in identifiers if len(i) >= MIN_IDENTIFIER}, key=len, reverse=True)
        self._identifiers = (
            re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, words)) + r")(?!\w)")
            if words else None
        )

    def __call__(self, text: str) -> str:
        """``text`` with the known secrets and identifiers masked, then :func:`redact`."""
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        if self._identifiers is not None:
            text = self._identifiers.sub(MASK, text)
        return redact(text)


def redact_strings(value: Any, redactor: Redactor) -> Any:
    """``value`` (JSON-like builtins: dicts, lists, strings, numbers) with every string in it,
    keys included, passed through ``redactor``."""
    if isinstance(value, str):
        return redactor(value)
    if isinstance(value, Mapping):
        return {redact_strings(k, redactor): redact_strings(v, redactor) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_strings(v, redactor) for v in value]
    return value
