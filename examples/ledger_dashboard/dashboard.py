"""The ledger dashboard: sync the slice of the BigQuery ``ledger`` its user's rules give it (one
cost centre), compute a monthly summary with SQL in the local replica and write it as
``ledger_monthly`` rows; the gateway's pipeline ships them to PostgreSQL.

Run: ``LAKESYNC_URL=http://127.0.0.1:8787 LAKESYNC_TOKEN=… python
examples/ledger_dashboard/dashboard.py`` (a token from ``lakesync token --sub dana --gw finance
--claim cost_centre=ops``). Prints the summary rows it holds as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from lakesync.client import LakeSyncClient

GATEWAY = "finance"

LEDGER = {
    "table": "ledger",
    "columns": [
        {"name": "id", "type": "integer"},
        {"name": "cost_centre", "type": "string"},
        {"name": "amount", "type": "decimal", "precision": 12, "scale": 2},
        {"name": "booked_at", "type": "timestamp"},
        {"name": "memo", "type": "string"},
    ],
}
MONTHLY = {
    "table": "ledger_monthly",
    "columns": [
        {"name": "cost_centre", "type": "string"},
        {"name": "month", "type": "string"},
        {"name": "total", "type": "number"},
        {"name": "entries", "type": "number"},
    ],
}

# The connector types the columns from BigQuery's (INT64, NUMERIC(12, 2), TIMESTAMP); the replica
# keeps a timestamp as its canonical UTC text, so its first 7 characters are the month.
SUMMARY = """
select cost_centre, substr(booked_at, 1, 7) as month, round(sum(amount), 2) as total,
       count(*) as entries
from ledger
group by cost_centre, month
order by month
"""


def run_dashboard(replica: str, url: str, token: str) -> list[dict[str, Any]]:
    """Sync, summarise by month, write the summary, sync again; the summary rows held."""
    with LakeSyncClient(
        replica, url=url, gateway_id=GATEWAY, token=token, schemas=[LEDGER, MONTHLY]
    ) as client:
        client.sync()
        for month in client.query(SUMMARY):
            client.upsert("ledger_monthly", f"{month['cost_centre']}:{month['month']}", month)
        client.sync()
        return client.query("select * from ledger_monthly order by row_id")


if __name__ == "__main__":
    replica = os.environ.get("DASHBOARD_REPLICA", "dashboard.db")
    summary = run_dashboard(replica, os.environ["LAKESYNC_URL"], os.environ["LAKESYNC_TOKEN"])
    json.dump(summary, sys.stdout, indent=2)
    print()
