"""Fixtures the security tests share with the gateway tests (:mod:`tests.api.conftest`): a fresh
app on an embedded SQLite store (``gateway``)."""

from tests.api.conftest import gateway

__all__ = ["gateway"]
