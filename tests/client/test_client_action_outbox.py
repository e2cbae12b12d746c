"""The client's action outbox without a gateway: actions are committed before anything is
sent and survive closing the replica; the asyncio client does the same."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakesync.client import ActionRecord, AsyncLakeSyncClient, LakeSyncClient
from lakesync.client.errors import ConfigError


def test_an_action_is_kept_until_a_gateway_answers(tmp_path: Path) -> None:
    path = str(tmp_path / "r.db")
    with LakeSyncClient(path, client_id="alice") as c:
        queued = c.execute_action("jira", "create_issue", {"projectKey": "OPS", "summary": "x"})
        assert (queued.state, queued.attempts, queued.result) == ("pending", 0, None)
        assert queued.idempotency_key == queued.action_id
        keyed = c.execute_action("crm", "update_record", {}, idempotency_key="order-7")
        with pytest.raises(ConfigError):
            c.run_actions()  # a local-only replica has no gateway to send to
    with LakeSyncClient(path, client_id="alice") as c:
        assert c.action(queued.action_id) == queued
        again = c.action(keyed.action_id)
        assert isinstance(again, ActionRecord) and again.idempotency_key == "order-7"
        assert c.action("unknown") is None


def test_the_asyncio_client_queues_actions_too(tmp_path: Path) -> None:
    async def main() -> ActionRecord:
        async with AsyncLakeSyncClient(str(tmp_path / "a.db"), client_id="bob") as c:
            record = await c.execute_action("jira", "add_comment", {"issue": "OPS-1", "body": "hi"})
            assert c.action(record.action_id) == record
            return record

    assert asyncio.run(main()).params == {"issue": "OPS-1", "body": "hi"}
