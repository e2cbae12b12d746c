"""Helpers of the gateway tests: tokens, deltas, a replica and a protocol-speaking client."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from litestar.testing import TestClient

from lakesync.api.settings import GatewaySettings
from lakesync.delta import RowDelta
from lakesync.hotlog.base import HotLog
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from lakesync.merge import MergedState
from lakesync.tokens import mint_token
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_response
from tests.wire_json import as_json, verified

SECRET = "test-secret-0123456789abcdef0123456789"
PREVIOUS_SECRET = "previous-secret-0123456789abcdef012345"


HANDOVER_OWNER_RULES: dict[str, Any] = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "handover": True,  # the tests give rows away (write access: WITH CHECK relaxed)
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}
"""``owner = jwt:sub`` on ``todos``, whose rows their owner may hand to someone else."""


def token(sub: str, gw: str = "gw1", role: str = "client", **claims: Any) -> str:
    """A valid token signed with the test secret."""
    return mint_token(SECRET, sub, gw, role, claims or None)


def auth(tok: str, evictions: bool = False) -> dict[str, str]:
    """Authorization header for a token; with ``evictions``, also the header of a client that
    understands view evictions (as the Python client does)."""
    headers = {"Authorization": f"Bearer {tok}"}
    if evictions:
        headers[FEATURES_HEADER] = VIEW_EVICTIONS_FEATURE
    return headers


def now_hlc(offset_ms: int = 0) -> int:
    """An HLC near the physical clock."""
    return (time.time_ns() // 1_000_000 + offset_ms) << 16


def delta(
    op: str, row: str, client: str, hlc: int | None = None, table: str = "todos", **cols: Any
) -> RowDelta:
    """A valid delta (deltaId computed by the core)."""
    return RowDelta.create(op, table, row, client, cols, now_hlc() if hlc is None else hlc)  # type: ignore[arg-type]


class Replica:
    """A client's local copy: every pulled delta joined with the core merge (which forgets a
    row on a view eviction)."""

    evictions = True  # it says it understands view evictions

    def __init__(self) -> None:
        self.state = MergedState()
        self.cursor = 0

    def apply(self, deltas: list[dict[str, Any]]) -> None:
        for d in deltas:
            self.state.apply(verified(d))

    def rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.state.live_rows()


class Gateway:
    """A TestClient on an app (or an httpx client of a served one) plus helpers speaking the
    sync protocol."""

    def __init__(self, client: TestClient[Any] | httpx.Client) -> None:
        self.http = client

    def push(
        self,
        tok: str,
        client_id: str,
        deltas: list[RowDelta],
        gw: str = "gw1",
        evictions: bool = False,
    ) -> Any:
        """A push, by default as a LakeSync v1 client (without ``X-LakeSync-Features``)."""
        body = {"clientId": client_id, "deltas": [as_json(d) for d in deltas]}
        return self.http.post(f"/v1/sync/{gw}/push", json=body, headers=auth(tok, evictions))

    def pull_page(
        self,
        tok: str,
        client_id: str,
        since: int,
        limit: int = 100,
        gw: str = "gw1",
        evictions: bool = True,
    ) -> Any:
        """One pull page, by default as a client that understands view evictions."""
        return self.http.get(
            f"/v1/sync/{gw}/pull",
            params={"since": str(since), "clientId": client_id, "limit": str(limit)},
            headers=auth(tok, evictions),
        )

    def sync(
        self,
        tok: str,
        client_id: str,
        replica: Replica | PlainReplica | WholeRowReplica,
        limit: int = 100,
        gw: str = "gw1",
    ) -> None:
        """Pull until hasMore is false, applying every page."""
        for _ in range(10_000):
            r = self.pull_page(tok, client_id, replica.cursor, limit, gw, replica.evictions)
            assert r.status_code == 200, r.text
            body = r.json()
            replica.apply(body["deltas"])
            replica.cursor = int(body["serverHlc"])
            if not body["hasMore"]:
                return
        raise AssertionError("pull never finished")

    def load_checkpoint(
        self, tok: str, replica: Replica | PlainReplica | WholeRowReplica, gw: str = "gw1"
    ) -> None:
        """Apply the gateway's checkpoint to a replica, frame by frame, and move its cursor to
        the checkpoint's position."""
        r = self.http.get(f"/v1/sync/{gw}/checkpoint", headers=auth(tok, replica.evictions))
        assert r.status_code == 200, r.text
        body = r.content
        while body:
            size = int.from_bytes(body[:4], "big")
            deltas, _, _ = decode_response(body[4 : 4 + size])
            replica.apply([as_json(d) for d in deltas])
            body = body[4 + size :]
        replica.cursor = int(r.headers["x-checkpoint-hlc"])

    def admin(self, method: str, path: str, gw: str = "gw1", **kw: Any) -> Any:
        return self.http.request(method, path, headers=auth(token("root", gw, "admin")), **kw)


def make_settings(tmp_path: Path, **overrides: Any) -> GatewaySettings:
    """Settings for a test app on an embedded store in ``tmp_path``."""
    return GatewaySettings(data_dir=tmp_path, jwt_secrets=(SECRET, PREVIOUS_SECRET), **overrides)


def filtered(
    rows: Mapping[tuple[str, str], dict[str, Any]], visible_fn: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows a predicate keeps."""
    return {k: v for k, v in rows.items() if visible_fn(k[0], v)}


class PlainReplica:
    """A client without per-cell clocks, applying deltas the way the LakeSync TypeScript client
    does (its ``applier.ts``): a DELETE removes the row, an INSERT inserts it and fails if the row
    exists, an UPDATE sets columns of an existing row; a page applies in one transaction and a
    failure rolls the whole page back."""

    evictions = False  # a LakeSync v1 client: it does not know view evictions

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute(
            "CREATE TABLE rows (tbl TEXT, row_id TEXT, data TEXT, PRIMARY KEY (tbl, row_id))"
        )
        self.cursor = 0

    def apply(self, deltas: list[dict[str, Any]]) -> None:
        self.db.execute("BEGIN")
        try:
            for wire in deltas:
                d = verified(wire)
                key = (d.table, d.row_id)
                if d.op == "DELETE":
                    self.db.execute("DELETE FROM rows WHERE tbl = ? AND row_id = ?", key)
                elif d.op == "INSERT":
                    self.db.execute(
                        "INSERT INTO rows VALUES (?, ?, ?)", (*key, json.dumps(d.values()))
                    )
                else:
                    found = self.db.execute(
                        "SELECT data FROM rows WHERE tbl = ? AND row_id = ?", key
                    ).fetchone()
                    if found is not None:
                        data = json.loads(found[0]) | d.values()
                        self.db.execute(
                            "UPDATE rows SET data = ? WHERE tbl = ? AND row_id = ?",
                            (json.dumps(data), *key),
                        )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            (t, r): {k: v for k, v in json.loads(data).items() if v is not None}
            for t, r, data in self.db.execute("SELECT tbl, row_id, data FROM rows")
        }


class WholeRowReplica:
    """A client applying deltas with the TypeScript client's documented semantics: whole-row
    last-writer-wins by ``(hlc, clientId)`` (a delta older than the row's last applied one is
    ignored), a DELETE is a tombstone at its clock, an INSERT sets the whole row, an UPDATE sets
    its columns on the row. Local writes apply at their own clock."""

    evictions = False  # a LakeSync v1 client: it does not know view evictions

    def __init__(self) -> None:
        self.state: dict[tuple[str, str], tuple[tuple[int, str], dict[str, Any] | None]] = {}
        self.cursor = 0

    def apply(self, deltas: list[dict[str, Any]]) -> None:
        for wire in deltas:
            self.write(verified(wire))

    def write(self, d: RowDelta) -> None:
        """Apply one delta (pulled, or written locally) if it is newer than the row."""
        key, clock = (d.table, d.row_id), (d.hlc, d.client_id)
        found = self.state.get(key)
        if found is not None and found[0] >= clock:
            return
        if d.op == "DELETE":
            self.state[key] = (clock, None)
        elif d.op == "INSERT" or found is None or found[1] is None:
            self.state[key] = (clock, d.values())
        else:
            self.state[key] = (clock, found[1] | d.values())

    def rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            k: {c: v for c, v in values.items() if v is not None}
            for k, (_, values) in self.state.items()
            if values is not None
        }


MEMBERS_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "shared",
            "tables": ["todos"],
            "filters": [
                {
                    "column": "list_id",
                    "op": "in",
                    "value": {
                        "table": "list_members",
                        "select": "list_id",
                        "where": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
                    },
                }
            ],
        },
        {
            "name": "memberships",
            "tables": ["list_members"],
            "filters": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
        },
    ],
}
"""Relational rules: the todos of every list the client is a member of, and its memberships."""


def set_rules(gateway: Gateway, rules: dict[str, Any], gw: str = "gw1") -> None:
    r = gateway.admin("POST", f"/v1/admin/sync-rules/{gw}", gw=gw, json=rules)
    assert r.status_code == 200, r.text


def checkpoint_now(store: HotLog, gw: str = "gw1", budget: int = 300) -> int:
    """Publish a checkpoint of the store's rows through its head (small chunks: many frames),
    as the lake's checkpoint job does; its position."""
    page = store.read_all_rows(gw)
    assert write_checkpoint(store, gw, page.head, sorted(page.rows.items()), budget) is not None
    return page.head
