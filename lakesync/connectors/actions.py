"""Actions: what a client may ask the gateway to do in an outside system (create a Jira issue,
update a Salesforce record), as opposed to the data connectors bring in.

An :class:`ActionHandler` names the action types it supports, each with a JSON Schema for its
params (:class:`ActionDescriptor`, what discovery lists), and executes one. Failures are an
:class:`ActionError` with a code and whether trying again may succeed (a 503 or a timeout) or
not (a 400, a missing project): the dispatcher remembers the second kind, never the first.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import httpx
import msgspec

from lakesync.connectors._http import SourceHTTPError

__all__ = ["ActionDescriptor", "ActionError", "ActionHandler", "http_failure"]


class ActionDescriptor(msgspec.Struct, rename="camel", frozen=True):
    """One supported action type, as discovery lists it."""

    action_type: str
    description: str
    params_schema: dict[str, Any]


class ActionError(Exception):
    """An action that did not succeed: ``code`` (SPEC-style), ``retryable``."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class ActionHandler(abc.ABC):
    """The actions of one connector."""

    @abc.abstractmethod
    def descriptors(self) -> list[ActionDescriptor]:
        """Every supported action type with its params schema."""

    @abc.abstractmethod
    async def execute(self, action_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Run one action (params already valid for its schema); return its result data or
        raise :class:`ActionError`."""

    async def aclose(self) -> None:  # noqa: B027 - handlers without resources need nothing
        """Release connections."""


def http_failure(exc: Exception) -> ActionError:
    """The :class:`ActionError` for an outside system's failure: throttling, unavailability
    and transport errors may pass (retryable), any other refusal will not."""
    if isinstance(exc, SourceHTTPError):
        retryable = exc.status in (408, 429) or exc.status >= 500
        return ActionError("ACTION_FAILED", str(exc), retryable)
    if isinstance(exc, httpx.TransportError):
        return ActionError("ACTION_FAILED", f"{type(exc).__name__}: {exc}", True)
    raise exc
