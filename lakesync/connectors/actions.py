"""Actions: what a client may ask the gateway to do in an outside system (create a Jira issue,
update a Salesforce record), as opposed to the data connectors bring in.

An :class:`ActionHandler` names the action types it supports, each with a JSON Schema for its
params (:class:`ActionDescriptor`, what discovery lists), and executes one. Failures are an
:class:`ActionError` whose outcome is one of three:

- it surely did not happen and may pass later (throttled, unavailable, never connected):
  ``retryable``, the dispatcher forgets the attempt;
- it surely did not happen and will not pass (a 400, a missing project): remembered;
- it **may have happened** (the request was sent, then a timeout, a cut connection or a 5xx
  that says nothing of the outcome): ``outcome_unknown``. Running it again blindly could do it
  twice, so the dispatcher keeps the key and, on the next attempt, asks the handler to
  :meth:`~ActionHandler.reconcile` (look the action up in the system by its key) before
  running it again. A handler that cannot look an action up makes it final
  (``retryable=False``), with a message saying what to check.

Messages are short and name no infrastructure (they reach clients); what an operator needs (the
URL, the system's reply) is the error's ``detail``, which goes to the log and the admin routes.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import msgspec

from lakesync.connector_specs import ActionGrant
from lakesync.connectors._http import SourceHTTPError

__all__ = [
    "OUTCOME_UNKNOWN",
    "ActionDescriptor",
    "ActionError",
    "ActionHandler",
    "http_failure",
    "reply_data",
]

OUTCOME_UNKNOWN = "ACTION_OUTCOME_UNKNOWN"
"""The code of an action that may or may not have taken effect."""

# Raised before the request left: the system never saw it, trying again is safe.
_NOT_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)
_NOT_DONE_STATUSES = frozenset({408, 429, 503})
"""Statuses that say the request was not acted on and may pass later."""


class ActionDescriptor(msgspec.Struct, rename="camel", frozen=True):
    """One supported action type, as discovery lists it."""

    action_type: str
    description: str
    params_schema: dict[str, Any]


class ActionError(Exception):
    """An action that did not succeed: ``code`` (as in the protocol), a short ``message`` for the
    client, whether the client should try again (``retryable``), whether it may have taken
    effect (``outcome_unknown``) and the ``detail`` for operators (log, admin routes)."""

    def __init__(
        self,
        code: str,
        message: str,
        retryable: bool,
        *,
        outcome_unknown: bool = False,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.outcome_unknown = outcome_unknown
        self.detail = detail


class ActionHandler(abc.ABC):
    """The actions of one connector, and who may run them."""

    grants: Sequence[ActionGrant] = ()
    """The connector's ``actions:`` grants (:func:`lakesync.connector_specs.may_run`); none =
    admin tokens only. Set by :func:`lakesync.connectors.open_actions` from the connector's spec."""

    reconcile_after: float = 0.0
    """Seconds after an unknown outcome before :meth:`reconcile` can tell (a request still in
    flight, an index catching up); a retry before then is told to come back later."""

    @abc.abstractmethod
    def descriptors(self) -> list[ActionDescriptor]:
        """Every supported action type with its params schema."""

    @abc.abstractmethod
    async def execute(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        """Run one action (params already valid for its schema); return its result data or
        raise :class:`ActionError`. ``key`` identifies the action for good (the same on every
        attempt): a handler that can reconcile marks what it creates with it."""

    async def reconcile(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any] | None:
        """After an attempt whose outcome is unknown: the result data if the action took
        effect, None if it surely did not (the dispatcher then runs it), or
        :class:`ActionError`. This default cannot tell, so the action ends there."""
        raise ActionError(
            OUTCOME_UNKNOWN,
            f"{action_type}: an earlier attempt may have taken effect and this connector cannot"
            " look it up; check the system before running it again under a new key",
            False,
            outcome_unknown=True,
        )

    async def aclose(self) -> None:  # noqa: B027 - handlers without resources need nothing
        """Release connections."""


def http_failure(exc: Exception, system: str, reconcilable: bool) -> ActionError:
    """The :class:`ActionError` for a request to ``system`` (``"Jira"``) that failed: not sent,
    throttled or unavailable may pass (retryable); sent and then cut off, timed out or answered
    with another 5xx is an unknown outcome (retryable, through reconciliation, when the
    handler can reconcile, else final); any other refusal will not pass."""
    unknown = (
        f"{system} did not confirm the action (it may have taken effect); "
        + ("retry with the same key: it is looked up before it runs again" if reconcilable
           else f"check {system} before running it again under a new key")
    )
    if isinstance(exc, SourceHTTPError):
        detail = str(exc)
        if exc.status in _NOT_DONE_STATUSES:
            return ActionError(
                "ACTION_FAILED", f"{system} is unavailable ({exc.status})", True, detail=detail
            )
        if exc.status >= 500:
            return ActionError(
                OUTCOME_UNKNOWN, unknown, reconcilable, outcome_unknown=True, detail=detail
            )
        return ActionError(
            "ACTION_FAILED", f"{system} refused the action ({exc.status})", False, detail=detail
        )
    if isinstance(exc, httpx.TransportError):
        detail = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, _NOT_SENT):
            return ActionError(
                "ACTION_FAILED", f"{system} could not be reached", True, detail=detail
            )
        return ActionError(
            OUTCOME_UNKNOWN, unknown, reconcilable, outcome_unknown=True, detail=detail
        )
    raise exc


def reply_data(response: httpx.Response) -> Any:
    """The body of a 2xx reply as JSON, or None when it is empty or unreadable: any 2xx is a
    success, whatever its body (reading it must not turn a done action into a failure)."""
    if not response.content:
        return None
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
