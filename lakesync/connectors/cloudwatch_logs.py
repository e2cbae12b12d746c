"""CloudWatch Logs as a source: the events of one or more log groups, one row each.

Each (log group, stream prefix) is read with ``FilterLogEvents`` from a time cursor, a page of
``chunk_rows`` events per call and per chunk. A chunk's cursor holds where its read started and
the ``nextToken`` of the next page, so a restart resumes at the page after the last stored
chunk; a finished read keeps the latest event time, and the next poll starts ``overlap``
seconds before it, so events ingested late (with an earlier timestamp) are still found. What is
read again changes nothing (row ids are stable: see :func:`event_row`). Paging is bounded: a
``nextToken`` seen before in the same read ends the poll with an error instead of looping.
``ThrottlingException`` (and ``ServiceUnavailableException``) is retried with exponential backoff
up to :data:`ATTEMPTS` calls; botocore's own retries are off so the backoff is this one.

With ``parse: json``, the top-level fields of a JSON object message become columns too, typed
by the first value seen (a later value of another type: a string column holds its JSON text,
other columns null; ``message`` keeps the whole text). The fields found are kept in the cursor
and registered as they appear. With ``retention``, each poll ends by deleting the stored rows
whose event is older than it (row ids start with the event's time, so this reads ids only).

The client (boto3) is synchronous; every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from lakesync.connector_specs import CloudWatchLogsSpec, parse_start
from lakesync.connectors._changes import Chunk
from lakesync.connectors._paging import PageGuard
from lakesync.connectors.base import Source
from lakesync.delta import validate_identifier
from lakesync.errors import LakeSyncError
from lakesync.schema import RESERVED_COLUMNS, TableSchema, parse_schema
from lakesync.tokens import parse_ttl

__all__ = [
    "ATTEMPTS",
    "BASE_COLUMNS",
    "MAX_FIELDS",
    "CloudWatchLogsSource",
    "RetentionWindow",
    "event_row",
]

_log = logging.getLogger("lakesync.connectors")

BASE_COLUMNS = {
    "log_group": "string",
    "log_stream": "string",
    "event_id": "string",
    "timestamp": "timestamp",
    "ingestion_time": "timestamp",
    "message": "string",
}
"""The columns of every event (its times are timestamps, milliseconds)."""

MAX_FIELDS = 100
"""At most this many JSON fields become columns (the rest stay in ``message``)."""

ATTEMPTS = 8
"""Calls per page when throttled, the first included."""

RETRIED = frozenset({"ThrottlingException", "ServiceUnavailableException"})

_TIME_DIGITS = 13  # epoch milliseconds, zero-padded: row ids sort by event time


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _instant(ms: int | None) -> datetime | None:
    # Exact: a float of epoch seconds could be a microsecond off.
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def event_row(group: str, event: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """An event's row id and base columns. The id is the event's time (zero-padded epoch
    milliseconds), its event id and a short digest of its log group and stream (event ids are
    unique within a log group, and some servers number them per stream)."""
    stream = str(event.get("logStreamName", ""))
    digest = hashlib.blake2b(f"{group}\n{stream}".encode(), digest_size=6).hexdigest()
    ts = int(event["timestamp"])
    row_id = f"{ts:0{_TIME_DIGITS}d}:{event['eventId']}:{digest}"
    return row_id, {
        "log_group": group,
        "log_stream": stream,
        "event_id": str(event["eventId"]),
        "timestamp": _instant(ts),
        "ingestion_time": _instant(event.get("ingestionTime")),
        "message": str(event.get("message", "")),
    }


class RetentionWindow:
    """The row ids whose event is at or after ``cutoff_ms``: what a ``keep_only`` chunk keeps
    (:class:`~lakesync.connectors._changes.KeySet`)."""

    def __init__(self, cutoff_ms: int) -> None:
        self.cutoff = f"{cutoff_ms:0{_TIME_DIGITS}d}"

    def missing(self, ids: Sequence[str]) -> list[str]:
        """The ids of events older than the cutoff."""
        return [i for i in ids if i[:_TIME_DIGITS] < self.cutoff]


def _field_type(value: Any) -> str | None:
    match value:
        case None:
            return None
        case bool():
            return "boolean"
        case int() | float():
            return "number"
        case str():
            return "string"
        case _:
            return "json"


def _fitted(value: Any, typ: str) -> Any:
    """``value`` as a ``typ`` column holds it (see the module docstring)."""
    found = _field_type(value)
    if found is None or typ in (found, "json"):
        return value
    if typ == "string":
        return json.dumps(value, ensure_ascii=False)
    return None


class CloudWatchLogsSource(Source):
    """Log groups' events by a time cursor (see the module docstring); ``client`` and ``now``
    (epoch seconds) replace boto3's client and the clock in tests."""

    def __init__(
        self,
        spec: CloudWatchLogsSpec,
        client: Any = None,
        now: Callable[[], float] = time.time,
        backoff: float = 0.5,
    ) -> None:
        self.spec = spec
        self._client = client
        self._now = now
        self.backoff = backoff
        self._fields: dict[str, str] = {}
        self.throttled = 0

    def _schema(self) -> TableSchema:
        columns = {**BASE_COLUMNS, **self._fields}
        listed = [{"name": n, "type": t} for n, t in columns.items()]
        return parse_schema({"table": self.spec.table, "columns": listed})

    async def schemas(self) -> Sequence[TableSchema]:
        """The events' table: the base columns and the JSON fields found so far."""
        return [self._schema()]

    def _logs(self) -> Any:
        if self._client is None:
            # heavy, optional (extra "connectors")
            import boto3  # noqa: PLC0415
            from botocore.config import Config  # noqa: PLC0415

            spec = self.spec
            self._client = boto3.client(
                "logs",
                region_name=spec.region or ("us-east-1" if spec.endpoint else None),
                endpoint_url=spec.endpoint or None,
                aws_access_key_id=spec.access_key_id or None,
                aws_secret_access_key=spec.secret_access_key or None,
                # Our backoff, not botocore's: one call per attempt.
                config=Config(
                    retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=60
                ),
            )
        return self._client

    async def _page(self, args: dict[str, Any]) -> dict[str, Any]:
        """One ``FilterLogEvents`` call, throttling retried with exponential backoff."""
        # heavy, optional (extra "connectors"): the gateway imports this module without it
        from botocore.exceptions import ClientError  # noqa: PLC0415

        client = self._logs()
        for attempt in range(ATTEMPTS):
            try:
                page: dict[str, Any] = await asyncio.to_thread(client.filter_log_events, **args)
                return page
            except ClientError as exc:
                if _code(exc) not in RETRIED or attempt == ATTEMPTS - 1:
                    raise
                self.throttled += 1
                await asyncio.sleep(min(self.backoff * 2**attempt, 30.0))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """One pass over every (log group, stream prefix) from its cursor."""
        spec = self.spec
        now = self._now()
        self._fields = {**dict(cursor.get("fields", {})), **self._fields}
        reads: dict[str, dict[str, Any]] = {k: dict(v) for k, v in cursor.get("reads", {}).items()}
        cutoff = int((now - parse_ttl(spec.retention)) * 1000) if spec.retention else None
        first = int(parse_start(spec.start, now) * 1000)
        for group in spec.log_groups:
            for prefix in spec.stream_prefixes or [""]:
                key = f"{group}:{prefix}"
                async for chunk in self._read(group, prefix, reads, key, first, cutoff):
                    yield chunk
        if cutoff is not None:
            yield Chunk(spec.table, keep_only=RetentionWindow(cutoff))

    def _since(self, state: Mapping[str, Any], first: int, cutoff: int | None) -> int:
        if "high" in state:
            since = int(state["high"]) - int(self.spec.overlap * 1000)
        else:
            since = int(state.get("since", first))
        return since if cutoff is None else max(since, cutoff)

    async def _read(
        self,
        group: str,
        prefix: str,
        reads: dict[str, dict[str, Any]],
        key: str,
        first: int,
        cutoff: int | None,
    ) -> AsyncGenerator[Chunk, None]:
        """One (log group, prefix) read, a chunk per page, each carrying the cursor."""
        # heavy, optional (extra "connectors"): the gateway imports this module without it
        from botocore.exceptions import ClientError  # noqa: PLC0415

        state = reads.get(key, {})
        token = state.get("token")
        since = int(state["since"]) if token else self._since(state, first, cutoff)
        high = state.get("high")
        # Only follow(): FilterLogEvents may answer an empty page that has a nextToken.
        guard = PageGuard(f"log group {group!r}")
        resumed = bool(token)  # a stored token, which the server may have let expire
        while True:
            args: dict[str, Any] = {
                "logGroupName": group,
                "startTime": since,
                "limit": self.spec.chunk_rows,
            }
            if prefix:
                args["logStreamNamePrefix"] = prefix
            if self.spec.filter_pattern:
                args["filterPattern"] = self.spec.filter_pattern
            if token:
                args["nextToken"] = token
            try:
                page = await self._page(args)
            except ClientError as exc:
                if not (resumed and _code(exc) == "InvalidParameterException"):
                    raise
                # A stored token no longer accepted (they expire): read from ``since`` again.
                _log.warning("log group %s: stored nextToken refused; reading again", group)
                token, resumed = None, False
                continue
            chunk = Chunk(self.spec.table)
            for event in page.get("events", []):
                ts = int(event["timestamp"])
                # The prefix is checked here too: not every server applies it.
                if not str(event.get("logStreamName", "")).startswith(prefix):
                    continue
                if cutoff is not None and ts < cutoff:
                    continue
                high = ts if high is None else max(high, ts)
                row_id, row = event_row(group, event)
                chunk.upserts[row_id] = row | self._extracted(row["message"], chunk)
            resumed = False
            token = page.get("nextToken")
            if token:
                guard.follow(token)
                reads[key] = {"since": since, "token": token, **_high(high)}
            else:
                reads[key] = {"high": high} if high is not None else {"since": since}
            chunk.cursor = {
                "reads": {k: dict(v) for k, v in reads.items()},
                "fields": dict(self._fields),
            }
            yield chunk
            if not token:
                return

    def _extracted(self, message: str, chunk: Chunk) -> dict[str, Any]:
        """A JSON object message's fields as columns (``parse: json``); new fields are added
        to the schema the chunk registers."""
        if self.spec.parse != "json" or not message.lstrip().startswith("{"):
            return {}
        try:
            doc = json.loads(message)
        except ValueError:
            return {}
        if not isinstance(doc, dict):
            return {}
        out: dict[str, Any] = {}
        for name, value in doc.items():
            typ = self._fields.get(name)
            if typ is None:
                typ = self._new_field(name, value)
                if typ is None:
                    continue
                chunk.schema = self._schema()
            out[name] = _fitted(value, typ)
        return out

    def _new_field(self, name: str, value: Any) -> str | None:
        typ = _field_type(value)
        taken = {n.lower() for n in (*BASE_COLUMNS, *self._fields, *RESERVED_COLUMNS)}
        if typ is None or name.lower() in taken or len(self._fields) >= MAX_FIELDS:
            return None
        try:
            validate_identifier(name, "field")
        except LakeSyncError:
            return None
        self._fields[name] = typ
        return typ

    async def aclose(self) -> None:
        """Drop the client."""
        self._client = None


def _code(exc: Any) -> str:
    """The error code of a botocore ``ClientError``."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def _high(high: int | None) -> dict[str, int]:
    return {} if high is None else {"high": high}
