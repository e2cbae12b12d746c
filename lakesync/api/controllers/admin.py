"""Admin routes (role ``admin``): flush, schemas, sync rules, connectors, action records,
per-gateway metrics, status, and the lake's runs handed to the gateway's warm worker."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Annotated, Any, Literal

import anyio.to_thread
import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency, Provide
from litestar.dto import DTOConfig, MsgspecDTO
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.response import Stream

from lakesync.api.actions import ActionDispatcher
from lakesync.api.auth import provide_admin_claims, provide_own_admin_claims
from lakesync.api.errors import ERROR_RESPONSES
from lakesync.api.services.connectors import ConnectorService
from lakesync.api.services.status import StatusService
from lakesync.api.services.sync import SyncService
from lakesync.errors import NotFoundError, ValidationError
from lakesync.lakehouse.runtime import WorkerJobs
from lakesync.lakehouse.worker import RunReply, WorkerEvent, encode_line
from lakesync.rules import SyncRules, parse_rules
from lakesync.schema import TableSchema, parse_schema
from lakesync.status import StatusResponse
from lakesync.tokens import Claims
from lakesync.wire import decode_json_object

__all__ = ["AdminController"]


class FlushResponse(msgspec.Struct, rename="camel"):
    """State of the landing flush for a gateway's store."""

    flushed: bool
    flushed_position: str
    unflushed_bytes: int


class RulesResponse(msgspec.Struct):
    """The rules now in force (null = everything visible) and the stamp of their last change."""

    rules: SyncRules | None
    stamp: str


class SchemaBody(MsgspecDTO[TableSchema]):
    """A table schema body checked by the core: not a JSON object is 400, a bad schema 422
    naming the problem; OpenAPI documents the body."""

    # The schema's JSON names, as in docs/protocol.md §10.
    config = DTOConfig(rename_strategy="camel")

    def decode_bytes(self, value: bytes) -> TableSchema:
        """The checked schema of a body."""
        return parse_schema(decode_json_object(value, "table schema"))


class RulesBody(MsgspecDTO[SyncRules]):
    """A sync rules body checked by the core (400 naming the problem); OpenAPI documents it."""

    config = DTOConfig(max_nested_depth=2)  # buckets and their filters

    def decode_bytes(self, value: bytes) -> SyncRules:
        """The checked rules of a body."""
        return parse_rules(decode_json_object(value, "sync rules"))


class LakeRun(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A run handed to the gateway's warm pipeline worker: ``lakesync pipeline run``
    (``job: pipeline``, with its ``fullRefresh`` and ``tests``), ``lakesync materialise`` or
    ``lakesync compact``."""

    job: Literal["pipeline", "materialise", "compact"]
    full_refresh: bool = False
    tests: bool = True


class LakeRunBody(MsgspecDTO[LakeRun]):
    """A lake run body: not a JSON object, an unknown job or field, or a wrongly typed option
    is 400 naming it; OpenAPI documents the body."""

    config = DTOConfig(rename_strategy="camel")

    def decode_bytes(self, value: bytes) -> LakeRun:
        """The checked run of a body."""
        try:
            return msgspec.convert(decode_json_object(value, "lake run"), LakeRun)
        except msgspec.ValidationError as exc:
            raise ValidationError(f"invalid lake run: {exc}") from None


class ConnectorsResponse(msgspec.Struct):
    """Registered connector documents."""

    connectors: list[dict[str, Any]]


class ActionRecordsResponse(msgspec.Struct):
    """Action records (see :meth:`lakesync.api.actions.ActionDispatcher.records`)."""

    actions: list[dict[str, Any]]


class GatewayMetricsResponse(msgspec.Struct, rename="camel"):
    """Per-gateway counters and hot-log figures."""

    gateway: str
    pushes: int
    pulls: int
    deltas_stored: int
    ws_connections: int
    hot_log_head: str
    unflushed_bytes: int
    ws_dropped: int


def _connectors(request: Request[Any, Any, Any]) -> ConnectorService:
    service: ConnectorService = request.app.state.connectors
    return service


class AdminController(Controller):
    """``/v1/admin/…/{gw}``."""

    path = "/v1/admin"
    dependencies = {"claims": Provide(provide_admin_claims, sync_to_thread=False)}  # noqa: RUF012
    tags = ["admin"]  # noqa: RUF012

    @post("/flush/{gw:str}", status_code=200, responses=ERROR_RESPONSES)
    async def flush(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
        request: Request[Any, Any, Any],
    ) -> FlushResponse:
        """Flush the hot log to the landing table now, if a flusher is attached to the app."""
        flusher = getattr(request.app.state, "flusher", None)
        if flusher is not None:
            await flusher(gw)
        store = service.store
        position = await anyio.to_thread.run_sync(store.flushed_position)
        unflushed = await anyio.to_thread.run_sync(store.unflushed_bytes)
        return FlushResponse(flusher is not None, str(position), unflushed)

    @post(
        "/schema/{gw:str}",
        status_code=200,
        responses=ERROR_RESPONSES,
        dto=SchemaBody,
        return_dto=None,
    )
    async def schema(
        self,
        gw: FromPath[str],
        data: JSONBody[TableSchema],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
    ) -> TableSchema:
        """Register a table schema or evolve it: new nullable columns, widened columns (422
        otherwise, saying why)."""
        return await service.put_schema(gw, data)

    @post(
        "/sync-rules/{gw:str}",
        status_code=200,
        responses=ERROR_RESPONSES,
        dto=RulesBody,
        return_dto=None,
    )
    async def sync_rules(
        self,
        gw: FromPath[str],
        data: JSONBody[SyncRules],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
    ) -> RulesResponse:
        """Replace the gateway's sync rules; clients resync on their next pull."""
        record = await service.set_rules(gw, data)
        return RulesResponse(record.rules, str(record.stamp))

    @get("/connectors/{gw:str}", responses=ERROR_RESPONSES)
    async def list_connectors(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> ConnectorsResponse:
        """Every connector of the gateway, declared or registered (credentials redacted); 404
        for a gateway id nothing is declared or stored for (a mistyped one)."""
        return ConnectorsResponse(await _connectors(request).documents(gw))

    @post("/connectors/{gw:str}", status_code=200, responses=ERROR_RESPONSES)
    async def add_connector(
        self,
        gw: FromPath[str],
        data: JSONBody[dict[str, Any]],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> dict[str, Any]:
        """Register (or replace) and start a connector: a ``name``, a ``type`` (``jira``,
        ``salesforce``, ``postgres``, ``mysql``, ``postgres_cdc``) and the kind's keys; write
        credentials as ``${VAR}`` (resolved from the gateway's environment) or
        ``${file:PATH}``. The reply, like the list, shows credentials as ``***``."""
        return await _connectors(request).register(gw, data)

    @get("/connectors/{gw:str}/{name:str}/status", responses=ERROR_RESPONSES)
    async def connector_status(
        self,
        gw: FromPath[str],
        name: FromPath[str],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> dict[str, Any]:
        """A running connector's counters (polls, rows read, deltas pushed, backpressure
        waits), timings, last error and stored cursor (404 if it does not run in this
        process)."""
        return await _connectors(request).status(gw, name)

    @delete("/connectors/{gw:str}/{name:str}", status_code=204, responses=ERROR_RESPONSES)
    async def remove_connector(
        self,
        gw: FromPath[str],
        name: FromPath[str],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> None:
        """Stop and unregister a connector (404 if unknown)."""
        await _connectors(request).unregister(gw, name)

    @get("/actions/{gw:str}", responses=ERROR_RESPONSES)
    async def action_records(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> ActionRecordsResponse:
        """The gateway's action records kept for the results' TTL, newest first: connector,
        type, client, idempotency key, state (``done``, ``unknown``: it may have taken effect
        and is looked up on the next attempt, ``running``), the result and what the outside
        system answered (``detail``, which clients are not shown)."""
        dispatcher: ActionDispatcher = request.app.state.actions
        return ActionRecordsResponse(await dispatcher.records(gw))

    @get("/metrics/{gw:str}", responses=ERROR_RESPONSES)
    async def metrics(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        service: NamedDependency[SyncService],
    ) -> GatewayMetricsResponse:
        """Counters of this gateway since the process started, and hot-log figures."""
        counts = service.metrics.count_of
        head = await anyio.to_thread.run_sync(service.store.head)
        unflushed = await anyio.to_thread.run_sync(service.store.unflushed_bytes)
        return GatewayMetricsResponse(
            gw,
            counts(gw, "pushes"),
            counts(gw, "pulls"),
            counts(gw, "deltas"),
            service.hub.count_for(gw),
            str(head),
            unflushed,
            counts(gw, "ws_dropped"),
        )

    @get(
        "/status",
        responses=ERROR_RESPONSES,
        dependencies={"claims": Provide(provide_own_admin_claims, sync_to_thread=False)},
    )
    async def status(
        self,
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
        all_gateways: Annotated[bool, QueryParameter(name="all")] = False,
    ) -> StatusResponse:
        """Whether data is flowing: per gateway the hot log, the landing flush, the scheduled
        pipeline's last runs and freshness, each declared destination (watermark lag, read
        just now; last shipment and error), each connector running here, the clients, and
        this process's refusals; ``failing`` names every failing thing (empty: all is well).
        For the token's gateway, or with ``all=true`` every gateway this store or the
        configuration knows (any gateway's admin token may ask: admin tokens are the
        operator's)."""
        service: StatusService = request.app.state.status
        if all_gateways:
            return await service.status(await service.known_gateways())
        return await service.gateway_status(str(claims["gw"]))

    @post(
        "/lake/run",
        status_code=200,
        responses=ERROR_RESPONSES,
        dto=LakeRunBody,
        return_dto=None,
        media_type="application/x-ndjson",
        dependencies={"claims": Provide(provide_own_admin_claims, sync_to_thread=False)},
    )
    async def lake_run(
        self,
        data: JSONBody[LakeRun],
        claims: NamedDependency[Claims],
        worker_jobs: NamedDependency[WorkerJobs | None],
    ) -> Stream:
        """Run ``lakesync pipeline run``, ``materialise`` or ``compact`` on this gateway's warm
        pipeline worker (what those commands do when ``lakesync up`` runs on their data dir),
        queued behind the run going on; streams NDJSON lines ``{"event": NAME, "data": ...}``:
        the run's progress (dbt nodes, tables shipped or compacted; ``queued`` while it waits),
        then one ``reply``. The run goes on if the client goes away. 404 when this process runs
        no pipeline worker."""
        if worker_jobs is None:
            raise NotFoundError(
                "this gateway runs no pipeline worker (it needs the pipeline extra: pip install "
                "'lakesync[pipeline]'); run the command with --in-process"
            )
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()

        def put(line: bytes | None) -> None:
            # From the worker loop's thread; the server may have stopped meanwhile.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lines.put_nowait, line)

        def event(e: WorkerEvent) -> None:
            put(encode_line(e))

        def ended(reply: Future[RunReply]) -> None:
            put(encode_line(reply.result()))
            put(None)

        worker_jobs.submit(
            data.job, full_refresh=data.full_refresh, tests=data.tests, on_event=event
        ).add_done_callback(ended)

        async def stream() -> AsyncIterator[bytes]:
            while (line := await lines.get()) is not None:
                yield line

        return Stream(stream(), media_type="application/x-ndjson")

    @get("/status/{gw:str}", responses=ERROR_RESPONSES)
    async def status_of_gateway(
        self,
        gw: FromPath[str],
        claims: NamedDependency[Claims],
        request: Request[Any, Any, Any],
    ) -> StatusResponse:
        """The status of one gateway (as ``/v1/admin/status`` shows it); 404 for a gateway
        nothing is declared or stored for."""
        service: StatusService = request.app.state.status
        return await service.gateway_status(gw)
