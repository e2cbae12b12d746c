"""Put the example's CloudWatch log events in place: the log group ``/examples/shop`` (made
afresh) with two services' JSON events, so the connector of ``lakesync.yaml`` has something to
bring in.

Run: ``LOGS_ENDPOINT=http://127.0.0.1:59060 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
python examples/logs_agent/seed.py`` (a local CloudWatch Logs server such as moto's; without
``LOGS_ENDPOINT``, the AWS account your credentials name).
"""

from __future__ import annotations

import json
import os
import time

import boto3

GROUP = "/examples/shop"

EVENTS = {
    "shop-api/1": [
        ("ERROR", "shop-api", "/checkout", "payment timeout"),
        ("INFO", "shop-api", "/checkout", "ok"),
        ("ERROR", "shop-api", "/checkout", "payment timeout"),
        ("ERROR", "shop-api", "/cart", "stock service 503"),
        ("WARN", "shop-api", "/cart", "slow"),
        ("ERROR", "shop-api", "/checkout", "card declined twice"),
    ],
    "shop-billing/1": [
        ("ERROR", "shop-billing", "/invoice", "pdf render failed"),
        ("INFO", "shop-billing", "/invoice", "ok"),
        ("ERROR", "shop-billing", "/invoice", "pdf render failed"),
    ],
}


def seed_logs(endpoint: str | None) -> int:
    """Make the log group afresh and put :data:`EVENTS` in it; the number of events put."""
    logs = boto3.client("logs", endpoint_url=endpoint,
                        region_name=os.environ.get("AWS_REGION", "us-east-1"))
    if logs.describe_log_groups(logGroupNamePrefix=GROUP)["logGroups"]:
        logs.delete_log_group(logGroupName=GROUP)
    logs.create_log_group(logGroupName=GROUP)
    now = int(time.time() * 1000) - 60_000
    for stream, rows in EVENTS.items():
        logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
        logs.put_log_events(logGroupName=GROUP, logStreamName=stream, logEvents=[
            {"timestamp": now + i * 1000, "message": json.dumps(
                {"level": level, "service": svc, "path": path, "status": 500, "msg": msg})}
            for i, (level, svc, path, msg) in enumerate(rows)
        ])
    return sum(len(rows) for rows in EVENTS.values())


if __name__ == "__main__":
    put = seed_logs(os.environ.get("LOGS_ENDPOINT") or None)
    print(f"{put} events in log group {GROUP}")
