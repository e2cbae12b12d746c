"""Action routes (docs/protocol.md §5): ``POST /v1/sync/{gw}/action`` and
``GET /v1/sync/{gw}/actions``."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, JSONBody

from lakesync.api.actions import Action, ActionDispatcher, ActionResult
from lakesync.api.auth import provide_claims
from lakesync.api.errors import ERROR_RESPONSES
from lakesync.api.services.sync import SyncService
from lakesync.connectors import ActionDescriptor
from lakesync.tokens import Claims

__all__ = ["ActionController", "ActionRequest", "ActionResponse", "ActionsResponse"]

MAX_ACTIONS = 100


class ActionRequest(msgspec.Struct, rename="camel"):
    """``POST /v1/sync/{gw}/action`` body."""

    client_id: str
    actions: Annotated[list[Action], msgspec.Meta(max_length=MAX_ACTIONS)]


class ActionResponse(msgspec.Struct):
    """Results in request order."""

    results: list[ActionResult]


class ActionsResponse(msgspec.Struct):
    """Action discovery: connector name → the action types it handles, with their params'
    JSON Schemas."""

    connectors: dict[str, list[ActionDescriptor]]


def _dispatcher(request: Request[Any, Any, Any]) -> ActionDispatcher:
    dispatcher: ActionDispatcher = request.app.state.actions
    return dispatcher


class ActionController(Controller):
    """``/v1/sync/{gw}/action(s)``."""

    path = "/v1/sync/{gw:str}"
    dependencies = {"claims": Provide(provide_claims, sync_to_thread=False)}  # noqa: RUF012
    tags = ["actions"]  # noqa: RUF012

    @post("/action", status_code=200, responses=ERROR_RESPONSES)
    async def action(
        self,
        gw: FromPath[str],
        data: JSONBody[ActionRequest],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
        request: Request[Any, Any, Any],
    ) -> ActionResponse:
        """Run actions in order, each idempotency key (else action id) at most once per
        client and connector, if the connector's grants let the token run them; a failure
        (refusals included) is a result, not an error status."""
        client_id = service.check_client(claims, data.client_id)
        service.check_rate(gw, client_id)
        dispatcher = _dispatcher(request)
        return ActionResponse([await dispatcher.execute(gw, claims, a) for a in data.actions])

    @get("/actions", responses=ERROR_RESPONSES)
    async def actions(
        self, gw: FromPath[str], claims: NamedDependency[Claims], request: Request[Any, Any, Any]
    ) -> ActionsResponse:
        """Which connectors of the gateway accept which action types from this token (only
        those its grants allow)."""
        return ActionsResponse(_dispatcher(request).discover(gw, claims))
