"""Shared lists: alice shares her groceries list with bob, then stops sharing it.

The app's backend (an admin client) writes the ``list_members`` rows; each user's device syncs
its own replica. Bob sees nothing of the list until he is a member, then its todos arrive on his
next sync and he adds one; alice's next sync brings it; once the backend removes his
membership, his next sync evicts the list's todos from his replica.

Run against ``lakesync up --config examples/shared_lists/lakesync.yaml``:
``LAKESYNC_URL=http://127.0.0.1:8787 LAKESYNC_JWT_SECRET=… python examples/shared_lists/app.py``.
``LISTS_DIR`` is where the replicas go (default: a temporary directory). Prints what bob's and
alice's replicas hold at each step, as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lakesync.client import LakeSyncClient
from lakesync.tokens import mint_client_token

GATEWAY = "lists_app"
TODOS = "select row_id, title from todos order by row_id"
SCHEMAS = [
    {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                   {"name": "list_id", "type": "string"}]},
    {"table": "list_members", "columns": [{"name": "list_id", "type": "string"},
                                          {"name": "user_id", "type": "string"}]},
]


def client(directory: Path, url: str, who: str, role: str = "client") -> LakeSyncClient:
    """A device of ``who`` (the backend's own client is an admin: it may share any list)."""
    secret = os.environ["LAKESYNC_JWT_SECRET"]  # the gateway's: it stays on the backend
    token = mint_client_token(secret, who, GATEWAY, role=role)
    return LakeSyncClient(str(directory / f"{who}.db"), url=url, gateway_id=GATEWAY, token=token,
                          schemas=SCHEMAS)


def main(directory: Path, url: str) -> dict[str, Any]:
    """Share, use and unshare a list; what alice and bob hold along the way."""
    seen: dict[str, Any] = {}
    with (
        client(directory, url, "backend", "admin") as backend,
        client(directory, url, "alice") as alice,
        client(directory, url, "bob") as bob,
    ):
        backend.upsert("list_members", "groceries:alice",
                       {"list_id": "groceries", "user_id": "alice"})
        backend.sync()
        alice.sync()
        alice.upsert("todos", "groceries:milk", {"title": "Milk", "list_id": "groceries"})
        alice.sync()
        bob.sync()
        seen["bob before"] = bob.query(TODOS)

        backend.upsert("list_members", "groceries:bob",
                       {"list_id": "groceries", "user_id": "bob"})  # share
        backend.sync()
        bob.sync()
        seen["bob shared"] = bob.query(TODOS)
        bob.upsert("todos", "groceries:bread", {"title": "Bread", "list_id": "groceries"})
        bob.sync()
        alice.sync()
        seen["alice"] = alice.query(TODOS)

        backend.delete("list_members", "groceries:bob")  # unshare
        backend.sync()
        bob.sync()
        seen["bob after"] = bob.query(TODOS)
    return seen


if __name__ == "__main__":
    where = os.environ.get("LISTS_DIR")
    with tempfile.TemporaryDirectory() as scratch:
        result = main(Path(where or scratch), os.environ["LAKESYNC_URL"])
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
