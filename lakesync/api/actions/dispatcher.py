"""Run clients' actions on connector handlers, each idempotency key at most once.

An action is addressed to a connector of the gateway and names an action type; its params
must match the type's JSON Schema (else ``VALIDATION_ERROR``). Its key is its
``idempotencyKey``, else its ``actionId``, scoped to the client and the connector. Before a
handler runs, the dispatcher *claims* the key in the store (one atomic document update, so two
requests with the same key, in this process or another sharing the store, never both run it):

- a success or a non-retryable failure is remembered for ``ttl`` seconds: the same key gets
  the same result without running again;
- a retryable failure (the system was unavailable, throttled us, timed out) releases the claim,
  so the client's retry runs the action again;
- a key claimed by a request still running answers ``ACTION_IN_PROGRESS`` (retryable); a claim
  older than ``claim_timeout`` (its process died) is taken over.

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

from lakesync.api.store import HotLog
from lakesync.connectors import ActionDescriptor, ActionError, ActionHandler

__all__ = ["ACTION_KIND", "Action", "ActionDispatcher", "ActionResult"]

_log = logging.getLogger("lakesync.actions")

ACTION_KIND = "action-result"
"""Store documents of remembered results and live claims, one per scoped key."""


class Action(msgspec.Struct, rename="camel"):
    """One imperative action addressed to a connector."""

    action_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    connector: str
    action_type: str
    params: dict[str, Any] = {}
    idempotency_key: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None


class ActionResult(msgspec.Struct, rename="camel", omit_defaults=True):
    """The outcome of one action: ``data`` on success, else ``code``, ``message`` and whether
    the client should try again."""

    action_id: str
    data: dict[str, Any] | None = None
    code: str | None = None
    message: str | None = None
    retryable: bool | None = None
    """Present on failures (the TypeScript client reads it), absent on success."""


Handlers = Callable[[str], Mapping[str, ActionHandler]]


def _scoped(gw: str, client_id: str, action: Action) -> str:
    key = action.idempotency_key or action.action_id
    raw = json.dumps([gw, client_id, action.connector, key])
    return hashlib.sha256(raw.encode()).hexdigest()


class ActionDispatcher:
    """Discovery and execution over the handlers ``handlers(gw)`` returns by connector name."""

    def __init__(
        self,
        store: HotLog,
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

    def discover(self, gw: str) -> dict[str, list[ActionDescriptor]]:
        """Every connector of ``gw`` with actions, and its action types."""
        return {name: h.descriptors() for name, h in sorted(self.handlers(gw).items())}

    async def execute(self, gw: str, client_id: str, action: Action) -> ActionResult:
        """Run ``action`` once per key (see the module docstring)."""
        handler = self.handlers(gw).get(action.connector)
        if handler is None:
            return _failed(action, "NOT_FOUND", f"no connector {action.connector!r} with actions")
        schemas = {d.action_type: d.params_schema for d in handler.descriptors()}
        if action.action_type not in schemas:
            known = ", ".join(sorted(schemas))
            message = f"connector {action.connector!r} has no action {action.action_type!r}"
            return _failed(action, "NOT_FOUND", f"{message} (it has: {known})")
        name = _scoped(gw, client_id, action)
        claim = uuid.uuid4().hex
        held = await anyio.to_thread.run_sync(
            self.store.update_doc, gw, ACTION_KIND, name, self._claimer(claim)
        )
        if held.get("claim") != claim:
            if held["state"] == "done":
                return _replay(action, held["result"])
            return _failed(action, "ACTION_IN_PROGRESS", "this key is being run", True)
        result = await self._run(handler, action, schemas[action.action_type])
        # Released (retryable) or remembered, through the same serialised update as claims:
        # a plain write could land under a concurrent claimer's write-back of the old body.
        body = {"state": "released", "at": 0.0}
        if not result.retryable:
            body = {"state": "done", "at": self.clock(), "result": msgspec.to_builtins(result)}

        def finish(current: dict[str, Any] | None) -> dict[str, Any]:
            return (
                body if current is not None and current.get("claim") == claim else current or body
            )

        await anyio.to_thread.run_sync(self.store.update_doc, gw, ACTION_KIND, name, finish)
        await self._sweep(gw)
        return result

    def _expired(self, now: float) -> Callable[[dict[str, Any]], bool]:
        def expired(body: dict[str, Any]) -> bool:
            if body.get("state") == "released":
                return True
            live = self.ttl if body.get("state") == "done" else self.claim_timeout
            return now - float(body.get("at", 0)) >= live

        return expired

    async def _sweep(self, gw: str) -> int:
        """Delete ``gw``'s expired records, unless a sweep ran less than ``sweep_every`` ago;
        returns how many went."""
        now = self.clock()
        if now - self._swept.get(gw, float("-inf")) < self.sweep_every:
            return 0
        self._swept[gw] = now
        return await anyio.to_thread.run_sync(
            self.store.delete_docs, gw, ACTION_KIND, self._expired(now)
        )

    def _claimer(self, claim: str) -> Callable[[dict[str, Any] | None], dict[str, Any]]:
        now = self.clock()
        expired = self._expired(now)

        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            if current is not None and not expired(current):
                return current
            return {"state": "running", "at": now, "claim": claim}

        return change

    @staticmethod
    async def _run(handler: ActionHandler, action: Action, schema: dict[str, Any]) -> ActionResult:
        problems = sorted(
            jsonschema.Draft202012Validator(schema).iter_errors(action.params), key=str
        )
        if problems:
            where = "/".join(str(p) for p in problems[0].absolute_path) or "params"
            return _failed(action, "VALIDATION_ERROR", f"{where}: {problems[0].message}")
        try:
            data = await handler.execute(action.action_type, action.params)
        except ActionError as exc:
            return _failed(action, exc.code, exc.message, exc.retryable)
        except Exception:  # a bug in a handler: logged; retryable, so the claim is released
            _log.exception("action %s.%s failed", action.connector, action.action_type)
            return _failed(action, "INTERNAL_ERROR", "the action failed in the gateway", True)
        return ActionResult(action.action_id, data=data)


def _failed(action: Action, code: str, message: str, retryable: bool = False) -> ActionResult:
    return ActionResult(action.action_id, code=code, message=message, retryable=retryable)


def _replay(action: Action, stored: Mapping[str, Any]) -> ActionResult:
    """A remembered result, answered under this request's action id."""
    return msgspec.convert({**stored, "actionId": action.action_id}, ActionResult)
