"""The CloudWatch Logs source against moto's standalone server (scripts/services.sh starts it):
events as rows, JSON fields, stream prefixes, paging, the overlap, retention, and, through a
small proxy in front of the server, throttling and a repeated ``nextToken``."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from lakesync.connector_specs import CloudWatchLogsSpec, parse_connector
from lakesync.connectors import PagingError
from lakesync.connectors.cloudwatch_logs import (
    ATTEMPTS,
    CloudWatchLogsSource,
    RetentionWindow,
)
from tests.connectors.conftest import GatewayUnderTest, require_cloudwatch
from tests.connectors.fake_http import FakeServer, Reply, Request

THROTTLED = {"__type": "ThrottlingException", "message": "Rate exceeded"}
"""The error body CloudWatch Logs answers a throttled call with (HTTP 400)."""


class LogsProxy(FakeServer):
    """A pass-through to the CloudWatch Logs server that can answer ``ThrottlingException``
    (``fail_next``), slow every call down (``delay``), keep handing out the first ``nextToken``
    it passed on (``repeat_token``) or refuse one (``refused_token``, as an expired one is)."""

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream
        self.delay = 0.0
        self.repeat_token = False
        self.first_token: str | None = None
        self.refused_token = ""
        self.calls = 0
        self.route("POST", "/", self._forward)

    def _forward(self, req: Request) -> Reply:
        self.calls += 1
        time.sleep(self.delay)
        if isinstance(req.body, dict) and req.body.get("nextToken") == self.refused_token:
            error = {"__type": "InvalidParameterException", "message": "invalid nextToken"}
            return 400, error, {}
        body = req.body if isinstance(req.body, bytes) else json.dumps(req.body).encode()
        skip = ("host", "content-length")
        headers = {k: v for k, v in req.headers.items() if k.lower() not in skip}
        r = httpx.post(self.upstream + "/", content=body, headers=headers, timeout=30)
        payload = r.json() if r.content else None
        if self.repeat_token and isinstance(payload, dict) and payload.get("nextToken"):
            self.first_token = self.first_token or payload["nextToken"]
            payload["nextToken"] = self.first_token
        return r.status_code, payload, {}


class LogGroup:
    """A fresh log group on the server, and events put into its streams."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.client = boto3.client(
            "logs",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        self.name = f"/svc/api-{uuid.uuid4().hex[:8]}"
        self.client.create_log_group(logGroupName=self.name)
        self.streams: set[str] = set()

    def put(self, stream: str, messages: list[Any], at_ms: int | None = None) -> None:
        """``messages`` (dicts are sent as JSON) one millisecond apart from ``at_ms``."""
        if stream not in self.streams:
            self.client.create_log_stream(logGroupName=self.name, logStreamName=stream)
            self.streams.add(stream)
        start = at_ms if at_ms is not None else int(time.time() * 1000) - len(messages)
        for i in range(0, len(messages), 1000):
            events = [
                {"timestamp": start + j, "message": m if isinstance(m, str) else json.dumps(m)}
                for j, m in enumerate(messages[i : i + 1000], start=i)
            ]
            self.client.put_log_events(
                logGroupName=self.name, logStreamName=stream, logEvents=events
            )

    def spec(self, endpoint: str | None = None, **body: Any) -> CloudWatchLogsSpec:
        base = {"kind": "cloudwatch_logs", "gateway": "gw1", "log_groups": [self.name]}
        base |= {"endpoint": endpoint or self.endpoint, "region": "us-east-1"}
        base |= {"access_key_id": "test", "secret_access_key": "test"}
        spec = parse_connector("logs1", base | body)
        assert isinstance(spec, CloudWatchLogsSpec)
        return spec


@pytest.fixture
def group() -> LogGroup:
    return LogGroup(require_cloudwatch())


@pytest.fixture
def proxy(group: LogGroup) -> Iterator[LogsProxy]:
    with LogsProxy(group.endpoint) as p:
        yield p  # type: ignore[misc]


def source(spec: CloudWatchLogsSpec, **kwargs: Any) -> CloudWatchLogsSource:
    return CloudWatchLogsSource(spec, backoff=0.05, **kwargs)


def test_events_become_rows_with_their_json_fields(
    gateway: GatewayUnderTest, group: LogGroup
) -> None:
    group.put("web-1", [{"level": "ERROR", "service": "api", "latency_ms": 12}, "plain text"])
    group.put("web-1", [{"level": "INFO", "service": "api", "latency_ms": "slow", "message": "x"}])
    assert gateway.poll(source(group.spec(parse="json"))) == 3
    rows = sorted(gateway.rows("logs").values(), key=lambda r: r["timestamp"])
    assert [r["message"] for r in rows][1] == "plain text"
    first, _, third = rows
    assert (first["level"], first["service"], first["latency_ms"]) == ("ERROR", "api", 12)
    assert first["log_group"] == group.name and first["log_stream"] == "web-1"
    assert first["timestamp"].endswith("Z") and first["ingestion_time"]
    assert third["latency_ms"] is None  # a number column: another type is not stored there
    assert json.loads(third["message"])["message"] == "x"  # a base column wins; message keeps it
    schema = asyncio.run(gateway.service.schemas("gw1"))["logs"].column_types()
    assert schema["level"] == "string" and schema["latency_ms"] == "number"


def test_stream_prefixes_and_filter_patterns(gateway: GatewayUnderTest, group: LogGroup) -> None:
    group.put("web-1", ["GET / 200", "GET /x 500"])
    group.put("worker-1", ["job done 500"])
    spec = group.spec(stream_prefixes=["web"], filter_pattern='"500"')
    assert gateway.poll(source(spec)) == 1
    assert [r["message"] for r in gateway.rows("logs").values()] == ["GET /x 500"]


def test_pages_of_chunk_rows_each_stored_with_its_cursor(
    gateway: GatewayUnderTest, group: LogGroup
) -> None:
    group.put("web-1", [f"event {i}" for i in range(120)])
    src = source(group.spec(chunk_rows=25))

    async def chunks() -> list[tuple[int, bool]]:
        return [(len(c.upserts), "token" in json.dumps(c.cursor)) async for c in src.poll({})]

    sizes = asyncio.run(chunks())
    assert [n for n, _ in sizes] == [25, 25, 25, 25, 20]
    assert [t for _, t in sizes] == [True] * 4 + [False]  # resumable mid-read, done at the end
    assert gateway.poll(source(group.spec(chunk_rows=25))) == 120


def test_a_repeated_next_token_ends_the_poll(
    gateway: GatewayUnderTest, group: LogGroup, proxy: LogsProxy
) -> None:
    group.put("web-1", [f"event {i}" for i in range(30)])
    proxy.repeat_token = True
    with pytest.raises(PagingError, match="repeats an earlier next-page token"):
        gateway.poll(source(group.spec(proxy.url, chunk_rows=10)))
    assert proxy.calls == 2  # the second page named the first's token again: no third call


def test_a_stored_token_refused_reads_from_the_cursors_start(
    gateway: GatewayUnderTest, group: LogGroup, proxy: LogsProxy
) -> None:
    group.put("web-1", [f"event {i}" for i in range(30)])
    proxy.refused_token = "expired"
    spec = group.spec(proxy.url, chunk_rows=10)
    since = int(time.time() * 1000) - 3_600_000
    cursor = {"reads": {f"{group.name}:": {"since": since, "token": "expired"}}}
    gateway.store.put_doc("gw1", "connector-cursor", "conn1", {"cursor": cursor})
    assert gateway.poll(source(spec)) == 30


def test_throttling_is_retried_with_backoff(
    gateway: GatewayUnderTest, group: LogGroup, proxy: LogsProxy
) -> None:
    group.put("web-1", [f"event {i}" for i in range(30)])
    proxy.fail_next(3, 400, body=THROTTLED)
    src = source(group.spec(proxy.url, chunk_rows=10))
    started = time.monotonic()
    assert gateway.poll(src) == 30
    assert src.throttled == 3 and time.monotonic() - started >= 0.05 + 0.1 + 0.2
    # Throttled past the attempts: the poll fails (and the next one starts over).
    proxy.fail_next(ATTEMPTS, 400, body=THROTTLED)
    with pytest.raises(ClientError, match="ThrottlingException"):
        gateway.poll(source(group.spec(proxy.url, chunk_rows=10)))


def test_the_overlap_finds_late_events_and_stores_nothing_twice(
    gateway: GatewayUnderTest, group: LogGroup
) -> None:
    now = int(time.time() * 1000)
    group.put("web-1", [f"event {i}" for i in range(10)], at_ms=now - 60_000)
    spec = group.spec(overlap=120)
    assert gateway.poll(source(spec)) == 10
    # Ingested late: a timestamp 30 s before the newest event already read.
    group.put("web-2", ["late"], at_ms=now - 90_000)
    group.put("web-1", ["new"], at_ms=now)
    assert gateway.poll(source(spec)) == 2
    assert gateway.poll(source(spec)) == 0
    assert len(gateway.log()) == 12 and len(gateway.rows("logs")) == 12
    # Without the overlap, the late event is missed.
    group.put("web-2", ["late again"], at_ms=now - 30_000)
    assert gateway.poll(source(group.spec(overlap=0))) == 0


def test_retention_deletes_rows_older_than_it(gateway: GatewayUnderTest, group: LogGroup) -> None:
    now = time.time()
    group.put("web-1", ["old"] * 5, at_ms=int((now - 3 * 3600) * 1000))
    group.put("web-1", ["recent"] * 5, at_ms=int((now - 600) * 1000))
    assert gateway.poll(source(group.spec(start="4h"))) == 10
    spec = group.spec(start="4h", retention="1h")
    assert gateway.poll(source(spec)) == 5  # five deletes
    assert {r["message"] for r in gateway.rows("logs").values()} == {"recent"}
    # Two hours on, the recent ones go too, and nothing older is read back in.
    assert gateway.poll(source(spec, now=lambda: now + 2 * 3600)) == 5
    assert gateway.rows("logs") == {}


def test_the_retention_window_keeps_ids_at_or_after_the_cutoff() -> None:
    window = RetentionWindow(1_700_000_000_000)
    ids = ["1699999999999:1:ab", "1700000000000:2:ab", "1700000000001:3:ab"]
    assert window.missing(ids) == ["1699999999999:1:ab"]


@pytest.mark.slow
def test_a_poll_of_5000_events_holds_one_page(gateway: GatewayUnderTest, group: LogGroup) -> None:
    """Memory: one page of ``chunk_rows`` events (the tracemalloc bound of
    tests/connectors/test_memory.py), whatever the size of the log group."""
    from tests.connectors.test_memory import CONSTANT, peak_of_poll

    group.put("web-1", [{"level": "INFO", "n": i, "pad": "x" * 200} for i in range(5000)])
    peak = peak_of_poll(gateway, source(group.spec(chunk_rows=100, parse="json")), "logs1")
    assert len(gateway.rows("logs")) == 5000
    print(f"cloudwatch poll of 5,000 events, chunk_rows=100: peak {peak / 2**20:.2f} MiB")
    assert peak < CONSTANT
