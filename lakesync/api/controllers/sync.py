"""Client sync routes (docs/protocol.md §5): push, pull, checkpoint (actions:
lakesync.api.controllers.actions)."""

from __future__ import annotations

import time
from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.di import NamedDependency, Provide
from litestar.dto import DTOConfig, MsgspecDTO
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter
from litestar.response import Stream

from lakesync import hlc as _hlc
from lakesync.api.auth import provide_claims
from lakesync.api.errors import ERROR_RESPONSES
from lakesync.api.services.initial_sync import check_cursor, open_checkpoint
from lakesync.api.services.sources import pull_source
from lakesync.api.services.sync import SyncService
from lakesync.checkpoint_chunks import CONTENT_TYPE
from lakesync.errors import ValidationError
from lakesync.schema import TableSchema
from lakesync.status import DEAD_LETTERS_HEADER, OUTBOX_HEADER, reported_count
from lakesync.tokens import Claims
from lakesync.wire import (
    FEATURES_HEADER,
    PullResponse,
    PushRequest,
    PushResponse,
    decode_push_request,
    knows_view_evictions,
    pull_response,
    push_deltas,
    push_response,
)

__all__ = ["PushBody", "SchemaList", "SyncController"]


class SchemaList(msgspec.Struct, frozen=True):
    """``GET /v1/sync/{gw}/schemas``: every registered table schema, by table name."""

    schemas: list[TableSchema]


Outbox = Annotated[
    str | None,
    HeaderParameter(
        name=OUTBOX_HEADER,
        required=False,
        description="The client's pending outbox (deltas not yet acknowledged), for the status.",
    ),
]
DeadLetters = Annotated[
    str | None,
    HeaderParameter(
        name=DEAD_LETTERS_HEADER,
        required=False,
        description="The client's dead letters (deltas refused for good), for the status.",
    ),
]


def _note_reported(
    service: SyncService, gw: str, claims: Claims, outbox: str | None, dead: str | None
) -> None:
    """Keep what a client reported of its backlog (``lakesync status`` shows it)."""
    pending, dead_letters = reported_count(outbox), reported_count(dead)
    if pending is not None or dead_letters is not None:
        service.clients.seen(gw, str(claims["sub"]), time.time(), pending, dead_letters)


Features = Annotated[
    str | None,
    HeaderParameter(
        name=FEATURES_HEADER,
        required=False,
        description="Protocol extensions the client understands, comma separated "
        "(`view-evictions`); a LakeSync v1 client sends none and gets whole rows.",
    ),
]


class PushBody(MsgspecDTO[PushRequest]):
    """A push body read by the core codec (:mod:`lakesync.wire`), not Litestar's: the bytes are
    decoded once, straight into the typed request, and errors name the JSON path; OpenAPI still
    documents the body."""

    # The wire's names (clientId, rowId, …) and the deltas' column entries, as in
    # docs/protocol.md §3/§5.
    config = DTOConfig(rename_strategy="camel", max_nested_depth=2)

    def decode_bytes(self, value: bytes) -> PushRequest:
        """The typed push request of a body."""
        return decode_push_request(value)


def _int_param(raw: str | None, name: str, default: int) -> int:
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 20:
        raise ValidationError(f"{name} must be a non-negative decimal integer, got {raw!r}")
    return int(raw)


class SyncController(Controller):
    """``/v1/sync/{gw}/…``: every route needs a token for ``gw``."""

    path = "/v1/sync/{gw:str}"
    dependencies = {"claims": Provide(provide_claims, sync_to_thread=False)}  # noqa: RUF012
    tags = ["sync"]  # noqa: RUF012

    @post("/push", status_code=200, responses=ERROR_RESPONSES, dto=PushBody, return_dto=None)
    async def push(
        self,
        gw: FromPath[str],
        data: JSONBody[PushRequest],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
        features: Features = None,
        outbox: Outbox = None,
        dead_letters: DeadLetters = None,
    ) -> PushResponse:
        """Store a batch of deltas atomically (known deltaIds count as accepted, applied once);
        a client without view evictions is answered the cursor to pull on from, not the head
        (docs/protocol.md §6)."""
        service.check_rate(gw, str(claims["sub"]))
        deltas, _ = push_deltas(data)  # the service checks the client id and the batch size
        whole_rows = not knows_view_evictions(features)
        result = await service.push(gw, claims, data.client_id, deltas, whole_rows=whole_rows)
        _note_reported(service, gw, claims, outbox, dead_letters)
        return push_response(result.server_hlc, result.accepted, result.stored)

    @get("/pull", responses=ERROR_RESPONSES)
    async def pull(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
        since: FromQuery[str | None] = None,
        client_id: Annotated[str | None, QueryParameter(name="clientId")] = None,
        limit: FromQuery[str | None] = None,
        source: FromQuery[str | None] = None,
        features: Features = None,
        outbox: Outbox = None,
        dead_letters: DeadLetters = None,
    ) -> PullResponse:
        """The deltas after ``since`` (the gateway's ingest cursor) that this client may see;
        with ``source=NAME`` the rows of that declared source adapter instead, paged by their
        ``synced_at`` (:mod:`lakesync.sources`)."""
        service.check_rate(gw, str(claims["sub"]))
        service.check_client(claims, client_id)
        cursor = 0 if since is None or since == "" else _hlc.parse_cursor(since, "since")
        settings = service.settings
        n = _int_param(limit, "limit", settings.pull_default_limit)
        if not 1 <= n <= settings.pull_max_limit:
            raise ValidationError(f"limit must be between 1 and {settings.pull_max_limit}")
        if source:
            page = await pull_source(service, gw, source, claims, cursor, n)
            return pull_response(page.deltas, page.server_hlc, page.has_more)
        whole_rows = not knows_view_evictions(features)
        result = await service.pull(gw, claims, cursor, n, whole_rows=whole_rows)
        await check_cursor(service, gw, str(claims["sub"]), cursor, result, whole_rows=whole_rows)
        _note_reported(service, gw, claims, outbox, dead_letters)
        return pull_response(result.deltas, result.server_hlc, result.has_more)

    @get("/schemas", responses=ERROR_RESPONSES)
    async def schemas(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
    ) -> SchemaList:
        """**Extension:** the gateway's registered table schemas (docs/protocol.md §10), so a
        client knows its tables' column types (and decodes them) before it pulls a row."""
        service.check_rate(gw, str(claims["sub"]))
        service.check_client(claims, None)
        found = await service.schemas(gw)
        return SchemaList([found[name] for name in sorted(found)])

    @get("/checkpoint", responses=ERROR_RESPONSES, media_type=CONTENT_TYPE)
    async def checkpoint(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
        features: Features = None,
    ) -> Stream:
        """Initial-sync checkpoint stream (docs/protocol.md §5): the frames this client may see,
        then pull from ``X-Checkpoint-Hlc``; 404 while the gateway has no checkpoint."""
        service.check_rate(gw, str(claims["sub"]))
        service.check_client(claims, None)
        whole_rows = not knows_view_evictions(features)
        opened = await open_checkpoint(service, gw, claims, whole_rows=whole_rows)
        return Stream(
            opened.frames,
            media_type=CONTENT_TYPE,
            headers={"X-Checkpoint-Hlc": str(opened.position)},
        )
