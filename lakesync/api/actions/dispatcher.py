"""Run clients' actions on connector handlers: only the permitted ones, each idempotency key at
most once.

An action is addressed to a connector of the gateway and names an action type. The connector's
``actions:`` grants say which tokens may run which types (:func:`lakesync.connector_specs.may_run`;
none: admin tokens only): discovery lists only those, and any other is refused (``FORBIDDEN``).
Its params must match the type's JSON Schema (else ``VALIDATION_ERROR``). Its key is its
``idempotencyKey``, else its ``actionId``, scoped to the client and the connector. Before a
handler runs, the dispatcher *claims* the key in the store (one atomic document update, so two
requests with the same key, in this process or another sharing the store, never both run it):

- a success (any 2xx of the system) or a refusal is remembered for ``ttl`` seconds: the same key
  gets the same result without running again;
- a failure that surely did not reach the system, or that the system did not act on (throttled,
  unavailable), releases the claim, so the client's retry runs the action again;
- an attempt whose outcome is **unknown** (sent, then a timeout, a cut connection, an
  unexpected 5xx; also a claim whose process died while running, or a handler's crash) is never
  run again blindly. It is recorded as ``unknown``; the next attempt with the key waits until
  the handler's ``reconcile_after`` has passed, then asks the handler to *reconcile*: look the
  action up in the system by its key (the action's result if it happened, and then it is done;
  if it surely did not, it runs). A handler that cannot look actions up ends it there, as a
  final ``ACTION_OUTCOME_UNKNOWN`` saying what to check;
- a key claimed by a request still running answers ``ACTION_IN_PROGRESS`` (retryable); a claim
  older than ``claim_timeout`` (its process died) is taken over, as an unknown outcome.

Clients get a code, a short message, whether to retry and the request id of the attempt that
decided; what the system answered (its URL, its body) is logged and kept in the record, which
the admin route ``GET /v1/admin/actions/{gw}`` shows (:meth:`ActionDispatcher.records`).

Records past their life (results older than ``ttl``, released keys, dead claims) are deleted from
the store by a sweep of the gateway's records that runs on a write, at most once per ``sweep_every``
seconds per gateway, so the store holds about one TTL's worth of keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import anyio.to_thread
import jsonschema
import msgspec

from lakesync.api.logs import REQUEST_ID
from lakesync.connector_specs import may_run
from lakesync.connectors import ActionDescriptor, ActionError, ActionHandler
from lakesync.connectors.actions import OUTCOME_UNKNOWN
from lakesync.hotlog.ports import DocumentStore

__all__ = ["ACTION_KIND", "Action", "ActionDispatcher", "ActionResult"]

_log = logging.getLogger("lakesync.actions")

ACTION_KIND = "action-result"
"""Store documents of remembered results, unknown outcomes and live claims, one per scoped key."""


class Action(msgspec.Struct, rename="camel"):
    """One imperative action addressed to a connector."""

    action_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    connector: str
    action_type: str
    params: dict[str, Any] = {}
    idempotency_key: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None


class ActionResult(msgspec.Struct, rename="camel", omit_defaults=True):
    """The outcome of one action: ``data`` on success, else ``code``, ``message``, whether
    the client should try again and the request id under which the gateway logged it."""

    action_id: str
    data: dict[str, Any] | None = None
    code: str | None = None
    message: str | None = None
    retryable: bool | None = None
    """Present on failures (the TypeScript client reads it), absent on success."""
    request_id: str | None = None


Handlers = Callable[[str], Mapping[str, ActionHandler]]


class _Outcome(msgspec.Struct):
    """What one attempt decided: the result, the record's next state and the detail."""

    result: ActionResult
    state: str  # "done" | "released" | "unknown"
    detail: str | None = None


def _scoped(gw: str, client_id: str, action: Action) -> str:
    key = action.idempotency_key or action.action_id
    raw = json.dumps([gw, client_id, action.connector, key])
    return hashlib.sha256(raw.encode()).hexdigest()


class ActionDispatcher:
    """Discovery and execution over the handlers ``handlers(gw)`` returns by connector name."""

    def __init__(
        self,
        store: DocumentStore,
        handlers: Handlers,
        ttl: float = 24 * 3600.0,
        claim_timeout: float = 300.0,
        clock: Callable[[], float] = time.time,
        sweep_every: float = 600.0,
    ) -> None:
        self.store = store
        self.handlers = handlers
        self.ttl = ttl
        self.claim_timeout = claim_timeout
        self.clock = clock
        self.sweep_every = sweep_every
        self._swept: dict[str, float] = {}

    def discover(self, gw: str, claims: Mapping[str, Any]) -> dict[str, list[ActionDescriptor]]:
        """Every connector of ``gw`` with action types the token may run, and those types."""
        found = {
            name: [d for d in h.descriptors() if may_run(h.grants, d.action_type, claims)]
            for name, h in sorted(self.handlers(gw).items())
        }
        return {name: types for name, types in found.items() if types}

    async def execute(self, gw: str, claims: Mapping[str, Any], action: Action) -> ActionResult:
        """Run ``action`` for the token's client, once per key (see the module docstring)."""
        handler = self.handlers(gw).get(action.connector)
        if handler is None:
            return _failed(action, "NOT_FOUND", f"no connector {action.connector!r} with actions")
        if not may_run(handler.grants, action.action_type, claims):
            message = f"not permitted to run {action.action_type!r} on {action.connector!r}"
            return _failed(action, "FORBIDDEN", message)
        schemas = {d.action_type: d.params_schema for d in handler.descriptors()}
        if action.action_type not in schemas:
            known = ", ".join(sorted(schemas))
            message = f"connector {action.connector!r} has no action {action.action_type!r}"
            return _failed(action, "NOT_FOUND", f"{message} (it has: {known})")
        problems = sorted(
            jsonschema.Draft202012Validator(schemas[action.action_type]).iter_errors(
                action.params
            ),
            key=str,
        )
        if problems:  # refused before the key is claimed: nothing to remember
            where = "/".join(str(p) for p in problems[0].absolute_path) or "params"
            return _failed(action, "VALIDATION_ERROR", f"{where}: {problems[0].message}")
        client_id = str(claims["sub"])
        name = _scoped(gw, client_id, action)
        claim = uuid.uuid4().hex
        meta = {
            "connector": action.connector,
            "actionType": action.action_type,
            "clientId": client_id,
            "idempotencyKey": action.idempotency_key or action.action_id,
        }
        held = await anyio.to_thread.run_sync(
            self.store.update_doc, gw, ACTION_KIND, name, self._claimer(claim, meta, handler)
        )
        if held.get("claim") != claim:
            if held["state"] == "done":
                return _replay(action, held["result"])
            if held["state"] == "unknown":
                message = (
                    "an earlier attempt may have taken effect and is looked up once it has"
                    " settled; retry later with the same key"
                )
                return _failed(action, OUTCOME_UNKNOWN, message, True)
            return _failed(action, "ACTION_IN_PROGRESS", "this key is being run", True)
        outcome = await self._attempt(handler, action, name, held)
        if outcome.detail is not None or outcome.state == "unknown":
            _log.warning(
                "action %s.%s of %s (key %r): %s %s: %s",
                action.connector,
                action.action_type,
                client_id,
                meta["idempotencyKey"],
                outcome.state,
                outcome.result.code,
                outcome.detail or outcome.result.message,
            )
        # Released or recorded, through the same serialised update as claims: a plain write
        # could land under a concurrent claimer's write-back of the old body.
        body: dict[str, Any] = {"state": "released", "at": 0.0}
        if outcome.state != "released":
            body = meta | {
                "state": outcome.state,
                "at": self.clock(),
                "result": msgspec.to_builtins(outcome.result),
                "detail": outcome.detail,
            }

        def finish(current: dict[str, Any] | None) -> dict[str, Any]:
            return (
                body if current is not None and current.get("claim") == claim else current or body
            )

        await anyio.to_thread.run_sync(self.store.update_doc, gw, ACTION_KIND, name, finish)
        await self._sweep(gw)
        return outcome.result

    async def records(self, gw: str) -> list[dict[str, Any]]:
        """The gateway's action records, newest first: what the admin route shows (the
        system's replies included, which clients are not told)."""
        docs = await anyio.to_thread.run_sync(self.store.list_docs, gw, ACTION_KIND)
        live = [b for b in docs.values() if b.get("state") in ("done", "unknown", "running")]
        return sorted(live, key=lambda b: -float(b.get("at", 0)))

    def _expired(self, now: float) -> Callable[[dict[str, Any]], bool]:
        def expired(body: dict[str, Any]) -> bool:
            if body.get("state") == "released":
                return True
            live = self.claim_timeout if body.get("state") == "running" else self.ttl
            return now - float(body.get("at", 0)) >= live

        return expired

    async def _sweep(self, gw: str) -> int:
        """Delete ``gw``'s expired records, unless a sweep ran less than ``sweep_every`` ago;
        returns how many went. A dead claim stays until a retry takes it over (its outcome is
        unknown), or until the TTL."""
        now = self.clock()
        if now - self._swept.get(gw, float("-inf")) < self.sweep_every:
            return 0
        self._swept[gw] = now
        expired = self._expired(now)

        def gone(body: dict[str, Any]) -> bool:
            if body.get("state") == "running":
                return now - float(body.get("at", 0)) >= self.ttl
            return expired(body)

        return await anyio.to_thread.run_sync(self.store.delete_docs, gw, ACTION_KIND, gone)

    def _claimer(
        self, claim: str, meta: Mapping[str, Any], handler: ActionHandler
    ) -> Callable[[dict[str, Any] | None], dict[str, Any]]:
        now = self.clock()
        expired = self._expired(now)

        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            state = None if current is None else current.get("state")
            if current is not None and state == "unknown":
                if now - float(current.get("at", 0)) < handler.reconcile_after:
                    return current  # not settled yet: nobody runs or looks it up
                return {**meta, "state": "running", "at": now, "claim": claim, "unsure": True}
            if current is not None and not expired(current):
                return current
            # A dead claim's process may have sent the request before it died.
            unsure = state == "running" and now - float(current.get("at", 0)) < self.ttl  # type: ignore[union-attr]
            return {**meta, "state": "running", "at": now, "claim": claim, "unsure": unsure}

        return change

    async def _attempt(
        self,
        handler: ActionHandler,
        action: Action,
        key: str,
        held: Mapping[str, Any],
    ) -> _Outcome:
        """Reconcile when an earlier attempt may have taken effect, run when it surely did
        not: the result, the record's next state and the detail for operators."""
        if held.get("unsure"):
            try:
                found = await handler.reconcile(action.action_type, action.params, key)
            except ActionError as exc:
                # Could not tell (the system unavailable meanwhile): still unknown, unless final.
                state = "unknown" if exc.retryable else "done"
                code = exc.code if not exc.retryable else OUTCOME_UNKNOWN
                result = _failed(action, code, exc.message, exc.retryable)
                return _Outcome(result, state, exc.detail)
            except Exception as exc:  # a bug in a handler: logged; the outcome stays unknown
                _log.exception("action %s.%s: look-up failed", action.connector, action.action_type)
                return self._crashed(action, exc)
            if found is not None:
                return _Outcome(ActionResult(action.action_id, data=found), "done")
        try:
            data = await handler.execute(action.action_type, action.params, key)
        except ActionError as exc:
            result = _failed(action, exc.code, exc.message, exc.retryable)
            if exc.outcome_unknown:
                return _Outcome(result, "unknown" if exc.retryable else "done", exc.detail)
            return _Outcome(result, "released" if exc.retryable else "done", exc.detail)
        except Exception as exc:  # a bug in a handler, maybe after the request went out
            _log.exception("action %s.%s failed", action.connector, action.action_type)
            return self._crashed(action, exc)
        return _Outcome(ActionResult(action.action_id, data=data), "done")

    @staticmethod
    def _crashed(action: Action, exc: Exception) -> _Outcome:
        message = "the action failed in the gateway; retry with the same key (it is looked up)"
        result = _failed(action, OUTCOME_UNKNOWN, message, True)
        return _Outcome(result, "unknown", f"{type(exc).__name__}: {exc}")


def _failed(action: Action, code: str, message: str, retryable: bool = False) -> ActionResult:
    rid = REQUEST_ID.get()
    return ActionResult(
        action.action_id,
        code=code,
        message=message,
        retryable=retryable,
        request_id=None if rid == "-" else rid,
    )


def _replay(action: Action, stored: Mapping[str, Any]) -> ActionResult:
    """A remembered result, answered under this request's action id."""
    return msgspec.convert({**stored, "actionId": action.action_id}, ActionResult)
