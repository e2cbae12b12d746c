"""Helpers of the gateway tests: tokens, deltas, a replica and a protocol-speaking client."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from lakesync.api.settings import GatewaySettings
from lakesync.delta import RowDelta
from lakesync.merge import MergedState
from lakesync.tokens import mint_token
from tests.wire_json import as_json, verified

SECRET = "test-secret-0123456789abcdef0123456789"
PREVIOUS_SECRET = "previous-secret-0123456789abcdef012345"


def token(sub: str, gw: str = "gw1", role: str = "client", **claims: Any) -> str:
    """A valid token signed with the test secret."""
    return mint_token(SECRET, sub, gw, role, claims or None)


def auth(tok: str) -> dict[str, str]:
    """Authorization header for a token."""
    return {"Authorization": f"Bearer {tok}"}


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

    def __init__(self) -> None:
        self.state = MergedState()
        self.cursor = 0

    def apply(self, deltas: list[dict[str, Any]]) -> None:
        for d in deltas:
            self.state.apply(verified(d))

    def rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.state.live_rows()


class Gateway:
    """A TestClient on an app plus helpers speaking the sync protocol."""

    def __init__(self, client: TestClient[Any]) -> None:
        self.http = client

    def push(self, tok: str, client_id: str, deltas: list[RowDelta], gw: str = "gw1") -> Any:
        body = {"clientId": client_id, "deltas": [as_json(d) for d in deltas]}
        return self.http.post(f"/v1/sync/{gw}/push", json=body, headers=auth(tok))

    def pull_page(
        self, tok: str, client_id: str, since: int, limit: int = 100, gw: str = "gw1"
    ) -> Any:
        return self.http.get(
            f"/v1/sync/{gw}/pull",
            params={"since": str(since), "clientId": client_id, "limit": str(limit)},
            headers=auth(tok),
        )

    def sync(
        self,
        tok: str,
        client_id: str,
        replica: Replica | PlainReplica,
        limit: int = 100,
        gw: str = "gw1",
    ) -> None:
        """Pull until hasMore is false, applying every page."""
        for _ in range(10_000):
            r = self.pull_page(tok, client_id, replica.cursor, limit, gw)
            assert r.status_code == 200, r.text
            body = r.json()
            replica.apply(body["deltas"])
            replica.cursor = int(body["serverHlc"])
            if not body["hasMore"]:
                return
        raise AssertionError("pull never finished")

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
