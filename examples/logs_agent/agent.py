"""The logs agent: sync the slice of CloudWatch logs its token's rules give it (the ERROR events
of one service), summarise them with SQL in the local replica, and write one ``findings`` row
per failing path; the gateway's pipeline ships ``findings`` to PostgreSQL.

Run: ``LAKESYNC_URL=http://127.0.0.1:8787 LAKESYNC_TOKEN=… python examples/logs_agent/agent.py``
(a token from ``lakesync token --sub agent-api --gw ops --claim service=shop-api``). Prints the
findings it holds as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from lakesync.client import LakeSyncClient

GATEWAY = "ops"

LOGS = {
    "table": "logs",
    "columns": [
        {"name": "timestamp", "type": "timestamp"},
        {"name": "log_stream", "type": "string"},
        {"name": "message", "type": "string"},
        {"name": "level", "type": "string"},
        {"name": "service", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "msg", "type": "string"},
    ],
}
FINDINGS = {
    "table": "findings",
    "columns": [
        {"name": "service", "type": "string"},
        {"name": "path", "type": "string"},
        {"name": "errors", "type": "number"},
        {"name": "first_seen", "type": "string"},
        {"name": "last_seen", "type": "string"},
        {"name": "sample", "type": "string"},
        {"name": "agent", "type": "string"},
    ],
}

# The rules already narrowed the replica to this agent's service and to errors.
SUMMARY = """
select service, path, count(*) as errors, min(timestamp) as first_seen,
       max(timestamp) as last_seen, max(msg) as sample
from logs
group by service, path
order by errors desc, path
"""


def run_agent(replica: str, url: str, token: str) -> list[dict[str, Any]]:
    """Sync, summarise, write a finding per failing path, sync again; the findings held."""
    with LakeSyncClient(
        replica, url=url, gateway_id=GATEWAY, token=token, schemas=[LOGS, FINDINGS]
    ) as client:
        client.sync()
        for problem in client.query(SUMMARY):
            row_id = f"{problem['service']}:{problem['path']}"
            client.upsert("findings", row_id, {**problem, "agent": client.client_id})
        client.sync()
        return client.query("select * from findings order by row_id")


if __name__ == "__main__":
    replica = os.environ.get("AGENT_REPLICA", "agent.db")
    findings = run_agent(replica, os.environ["LAKESYNC_URL"], os.environ["LAKESYNC_TOKEN"])
    json.dump(findings, sys.stdout, indent=2)
    print()
