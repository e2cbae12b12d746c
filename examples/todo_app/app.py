"""The todo app: one user's todos on two devices, one synchronous, one asyncio.

The app's backend mints each device's token (``lakesync.tokens.mint_client_token``: the device
is the client id, the user a claim the rules read). The laptop (``LakeSyncClient``) writes a
todo, syncs and watches its table; the phone (``AsyncLakeSyncClient``, as an asyncio app holds
it) syncs, sees the todo, ticks it off and adds one; the laptop's next sync brings both, and its
watch is told. Each device keeps its own SQLite replica and works offline between syncs.

Run: ``LAKESYNC_URL=http://127.0.0.1:8787 LAKESYNC_JWT_SECRET=… python examples/todo_app/app.py``
against ``lakesync up --config examples/todo_app/lakesync.yaml``. ``APP_USER`` is the user
(default ``alice``), ``TODO_DIR`` where the replicas go (default: a temporary directory). Prints
what each device holds, and what the watch saw, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lakesync.client import AsyncLakeSyncClient, Change, LakeSyncClient
from lakesync.tokens import mint_client_token

GATEWAY = "todos_app"
TODOS = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "owner", "type": "string"},
    ],
}
ALL = "select row_id, title, done from todos order by row_id"


def device_token(user: str, device: str) -> str:
    """What the app's backend does once the user signed in on a device."""
    secret = os.environ["LAKESYNC_JWT_SECRET"]  # the gateway's: it stays on the backend
    return mint_client_token(secret, f"{user}-{device}", GATEWAY, {"user": user}, "1h")


async def phone(replica: str, url: str, user: str) -> list[dict[str, Any]]:
    """The asyncio device: sync, tick off the laptop's todo, add one, sync; what it holds."""
    async with AsyncLakeSyncClient(
        replica, url=url, gateway_id=GATEWAY, token=device_token(user, "phone"), schemas=[TODOS]
    ) as client:
        await client.sync()
        await client.update("todos", f"{user}:milk", {"done": True})
        await client.upsert("todos", f"{user}:bread",
                            {"title": "Bread", "done": False, "owner": user})
        await client.sync()
        return await client.query(ALL)


def main(directory: Path, url: str, user: str) -> dict[str, Any]:
    """Run both devices; what each holds and what the laptop's watch saw."""
    seen: list[str] = []

    def on_change(changes: list[Change]) -> None:
        seen.extend(f"{c.origin} {c.kind} {c.row_id}" for c in changes)

    with LakeSyncClient(
        str(directory / "laptop.db"), url=url, gateway_id=GATEWAY,
        token=device_token(user, "laptop"), schemas=[TODOS],
    ) as laptop, laptop.watch("todos", on_change):
        # Row ids are the gateway's: one user's todo must not take another's id.
        laptop.upsert("todos", f"{user}:milk", {"title": "Milk", "done": False, "owner": user})
        laptop.sync()
        on_phone = asyncio.run(phone(str(directory / "phone.db"), url, user))
        laptop.sync()  # brings the phone's two changes
        return {"laptop": laptop.query(ALL), "phone": on_phone, "watched": seen}


if __name__ == "__main__":
    where = os.environ.get("TODO_DIR")
    with tempfile.TemporaryDirectory() as scratch:
        result = main(Path(where or scratch), os.environ["LAKESYNC_URL"],
                      os.environ.get("APP_USER", "alice"))
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
