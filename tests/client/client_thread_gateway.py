"""A real gateway over HTTP, served from the test's own process on a store the test also holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import httpx

from lakesync.client import LakeSyncClient
from lakesync.hotlog.base import HotLog
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from tests.api.helpers import auth, token
from tests.wire_json import as_json

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "owner", "type": "string"},
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
    ],
}


class ThreadGateway:
    """A gateway served from this process on a store the test holds too: it can publish
    checkpoints of the store's rows and trim the log as the lake job does after a pipeline run."""

    def __init__(self, store: HotLog, url: str) -> None:
        self.store = store
        self.url = url

    def client(
        self, path: Path, sub: str, transport: Literal["http", "websocket"] = "http"
    ) -> LakeSyncClient:
        return LakeSyncClient(
            str(path),
            url=self.url,
            gateway_id="gw1",
            token=token(sub),
            schemas=[TODOS],
            transport=transport,
        )

    def admin_push(self, *deltas: Any) -> None:
        body = {"clientId": "root", "deltas": [as_json(d) for d in deltas]}
        r = httpx.post(
            f"{self.url}/v1/sync/gw1/push",
            json=body,
            headers=auth(token("root", role="admin")),
        )
        assert r.status_code == 200, r.text

    def checkpoint_and_trim(self) -> int:
        """What the lake job does after a pipeline run, with a zero retention."""
        page = self.store.read_all_rows("gw1")
        write_checkpoint(self.store, "gw1", page.head, sorted(page.rows.items()), 500)
        self.store.mark_flushed(page.head)
        assert self.store.trim_log("gw1", page.head) > 0
        return page.head
