"""Where the client's bearer token comes from, and the client id it implies."""

from __future__ import annotations

import threading
from collections.abc import Callable

from lakesync.client.errors import AuthError, ConfigError
from lakesync.tokens import unverified_claims

__all__ = ["TokenProvider", "TokenSource"]

TokenSource = str | Callable[[], str]


class TokenProvider:
    """Holds the current token; a callable source is asked again when the gateway says 401.

    The client id is the token's ``sub`` claim, read without verifying the signature (only the
    gateway holds the secret).
    """

    def __init__(self, source: TokenSource) -> None:
        if not isinstance(source, str) and not callable(source):
            raise ConfigError("token must be a JWT string or a callable returning one")
        self._source = source
        self._lock = threading.Lock()
        self._token = self._fetch()

    def _fetch(self) -> str:
        token = self._source if isinstance(self._source, str) else self._source()
        if not isinstance(token, str) or not token:
            raise AuthError("the token callable returned no token")
        return token

    @property
    def token(self) -> str:
        """The current token."""
        return self._token

    @property
    def refreshable(self) -> bool:
        """Whether a 401 can be answered with a fresh token (the source is a callable)."""
        return not isinstance(self._source, str)

    def refresh(self) -> str:
        """Ask the source for a new token (a fixed string stays the same)."""
        with self._lock:
            self._token = self._fetch()
            return self._token

    @property
    def client_id(self) -> str:
        """The token's ``sub`` claim."""
        return str(unverified_claims(self._token)["sub"])
