"""Schema registration is one atomic read-modify-write per table, on every store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lakesync.api.metrics import GatewayMetrics
from lakesync.api.services.hub import Hub
from lakesync.api.services.sync import SyncService
from lakesync.errors import SchemaError
from lakesync.hotlog.base import HotLog
from lakesync.schema import TableSchema, parse_schema
from tests.api.helpers import make_settings

ADDERS = 12
BASE = [{"name": "title", "type": "string"}]


def test_concurrent_additive_evolutions_never_lose_an_acknowledged_column(
    store: HotLog, tmp_path: Path
) -> None:
    """Callers that each add their own column to the same base race; a caller whose request
    would drop another's column must be refused (422), so every column of every acknowledged
    answer is in the stored schema (a read and a write in separate transactions lose some)."""
    service = SyncService(store, make_settings(tmp_path), GatewayMetrics(), Hub(10))
    asyncio.run(service.put_schema("gw1", parse_schema({"table": "todos", "columns": BASE})))

    async def add(i: int) -> TableSchema | None:
        columns = [*BASE, {"name": f"c{i}", "type": "number"}]
        try:
            return await service.put_schema(
                "gw1", parse_schema({"table": "todos", "columns": columns})
            )
        except SchemaError:
            return None

    async def main() -> list[TableSchema | None]:
        return await asyncio.gather(*(add(i) for i in range(ADDERS)))

    answers = [a for a in asyncio.run(main()) if a is not None]
    stored = asyncio.run(service.schemas("gw1"))["todos"]
    assert answers, "no evolution was acknowledged"
    acknowledged = {c.name for a in answers for c in a.columns}
    assert acknowledged <= {c.name for c in stored.columns}
    assert stored in answers  # the stored schema is the last acknowledged one


def test_registering_again_is_idempotent_and_evolution_stays_additive(
    store: HotLog, tmp_path: Path
) -> None:
    service = SyncService(store, make_settings(tmp_path), GatewayMetrics(), Hub(10))
    v1 = parse_schema({"table": "todos", "columns": BASE})
    v2 = parse_schema({"table": "todos", "columns": [*BASE, {"name": "n", "type": "number"}]})
    assert asyncio.run(service.put_schema("gw1", v1)) == v1
    assert asyncio.run(service.put_schema("gw1", v2)) == v2
    assert asyncio.run(service.put_schema("gw1", v2)) == v2
    try:
        asyncio.run(service.put_schema("gw1", v1))
    except SchemaError as exc:
        assert "cannot be removed" in exc.message
    else:
        raise AssertionError("removing a column was accepted")
    assert asyncio.run(service.schemas("gw1")) == {"todos": v2}
