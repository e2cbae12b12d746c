"""Salesforce: Account, Contact, Opportunity and Lead records by SOQL (REST API).

- **Login**: the OAuth 2.0 username-password flow (``/services/oauth2/token``) gives an access
  token and the org's ``instance_url``. A 401 (expired or revoked session) logs in again once
  and repeats the request; a second 401 fails the poll.
- **Changes**: per object ``SELECT … WHERE LastModifiedDate >= cursor - overlap ORDER BY
  LastModifiedDate, Id``, paged through ``nextRecordsUrl`` (a server-side snapshot of the
  query); the cursor is the greatest ``LastModifiedDate`` stored. 503s and 429s are retried.
- **Deletions**: ``/sobjects/{Object}/deleted/?start=&end=`` from the last covered date
  (``latestDateCovered``) on; Salesforce keeps them about 15 days, so a connector stopped for
  longer must be reset (delete its cursor) to reload.

Tables ``sf_accounts``, ``sf_contacts``, ``sf_opportunities``, ``sf_leads`` keyed by the
18-character record Id, one snake_case column per field.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from lakesync.connector_specs import SALESFORCE_TABLES, SalesforceSpec
from lakesync.connectors._changes import split_rows
from lakesync.connectors._cursor import later, parse_time
from lakesync.connectors._http import SourceHTTPError, check, request, segment
from lakesync.connectors._paging import PageGuard, PagingError
from lakesync.connectors._types import declared_column
from lakesync.connectors.actions import ActionDescriptor, ActionHandler, http_failure
from lakesync.connectors.base import Chunk, Source
from lakesync.schema import TableSchema, parse_schema

__all__ = ["OBJECTS", "SalesforceActions", "SalesforceSession", "SalesforceSource", "soql_for"]

# Types as Salesforce documents the fields: datetime → timestamp, date → date, currency →
# decimal(18,2) (the precision and scale of the standard currency fields), int → integer,
# percent → number; the poller encodes the API's values (ISO 8601 text, JSON numbers).
_COMMON = {"Name": "string", "OwnerId": "string", "CreatedDate": "timestamp"}
_COMMON |= {"LastModifiedDate": "timestamp"}
OBJECTS: dict[str, tuple[str, dict[str, str]]] = {
    "Account": (
        SALESFORCE_TABLES["Account"],
        _COMMON
        | {
            "Type": "string",
            "Industry": "string",
            "AnnualRevenue": "decimal(18,2)",
            "NumberOfEmployees": "integer",
            "BillingCity": "string",
            "BillingCountry": "string",
        },
    ),
    "Contact": (
        SALESFORCE_TABLES["Contact"],
        _COMMON
        | {
            "FirstName": "string",
            "LastName": "string",
            "Email": "string",
            "Phone": "string",
            "Title": "string",
            "AccountId": "string",
        },
    ),
    "Opportunity": (
        SALESFORCE_TABLES["Opportunity"],
        _COMMON
        | {
            "StageName": "string",
            "Amount": "decimal(18,2)",
            "Probability": "number",
            "CloseDate": "date",
            "IsClosed": "boolean",
            "IsWon": "boolean",
            "AccountId": "string",
        },
    ),
    "Lead": (
        SALESFORCE_TABLES["Lead"],
        _COMMON
        | {
            "FirstName": "string",
            "LastName": "string",
            "Company": "string",
            "Email": "string",
            "Status": "string",
            "LeadSource": "string",
            "IsConverted": "boolean",
        },
    ),
}
"""Object → (gateway table, field → column type, ``decimal(p,s)`` written out)."""


def column_name(field: str) -> str:
    """``AnnualRevenue`` → ``annual_revenue``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", field).lower()


def soql_for(obj: str, since: str | None, overlap: float) -> str:
    """The incremental query of one object (every record the first time)."""
    fields = ", ".join(["Id", *OBJECTS[obj][1]])
    where = ""
    if since is not None:
        mark = parse_time(since) - timedelta(seconds=overlap)
        where = f" WHERE LastModifiedDate >= {mark.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
    return f"SELECT {fields} FROM {obj}{where} ORDER BY LastModifiedDate ASC, Id ASC"


def flatten(obj: str, record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A record's row id and typed columns."""
    return str(record["Id"]), {column_name(f): record.get(f) for f in OBJECTS[obj][1]}


class SalesforceSession:
    """An OAuth session on the org: logs in on first use and once more on a 401."""

    def __init__(self, spec: SalesforceSpec) -> None:
        self.spec = spec
        self.http = httpx.AsyncClient(timeout=spec.timeout)
        self.instance_url: str | None = None
        self.logins = 0

    async def login(self) -> None:
        """The username-password flow: a fresh access token and the instance URL."""
        form = {
            "grant_type": "password",
            "client_id": self.spec.client_id,
            "client_secret": self.spec.client_secret,
            "username": self.spec.username,
            "password": self.spec.password,
        }
        url = f"{self.spec.login_url.rstrip('/')}/services/oauth2/token"
        body = check(await request(self.http, "POST", url, data=form))
        self.http.headers["Authorization"] = f"Bearer {body['access_token']}"
        self.instance_url = str(body["instance_url"]).rstrip("/")
        self.logins += 1

    async def request(self, method: str, path: str, attempts: int = 8, **kw: Any) -> httpx.Response:
        """A request on the instance (``path`` from ``/services``); 429/503 retried
        ``attempts`` times, a 401 answered by one new login."""
        if self.instance_url is None:
            await self.login()
        for attempt in range(2):
            url = f"{self.instance_url}{path}"
            response = await request(self.http, method, url, attempts=attempts, **kw)
            if response.status_code != 401 or attempt:
                return response
            await self.login()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()


class SalesforceSource(Source):
    """Salesforce objects (see the module docstring)."""

    def __init__(self, spec: SalesforceSpec) -> None:
        self.spec = spec
        self.session = SalesforceSession(spec)

    async def schemas(self) -> Sequence[TableSchema]:
        """One table per configured object."""
        return [
            parse_schema(
                {
                    "table": OBJECTS[o][0],
                    "columns": [
                        declared_column(column_name(f), t) for f, t in OBJECTS[o][1].items()
                    ],
                }
            )
            for o in self.spec.objects
        ]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.session.aclose()

    async def _get(self, path: str, **params: Any) -> Any:
        headers = {"Sforce-Query-Options": f"batchSize={self.spec.page_size}"}
        return check(await self.session.request("GET", path, params=params, headers=headers))

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """Changed records, then deletions, object by object."""
        state: dict[str, dict[str, Any]] = {o: dict(cursor.get(o, {})) for o in self.spec.objects}
        for obj in self.spec.objects:
            async for chunk in self._changed(obj, state):
                yield chunk
            async for chunk in self._deleted(obj, state):
                yield chunk

    async def _changed(self, obj: str, state: dict[str, dict[str, Any]]) -> AsyncIterator[Chunk]:
        table = OBJECTS[obj][0]
        mine = state[obj]
        started = datetime.now(UTC)
        version = self.spec.api_version
        page = await self._get(
            f"/services/data/{version}/query",
            q=soql_for(obj, mine.get("modified"), self.spec.overlap),
        )
        guard = PageGuard(f"Salesforce query of {obj}")
        while True:
            rows = dict(flatten(obj, r) for r in page.get("records", []))
            last = bool(page.get("done", True))
            guard.page(rows, last)
            for part in split_rows(rows, self.spec.chunk_rows):
                for row in part.values():
                    mine["modified"] = later(mine.get("modified"), row["last_modified_date"])
                yield Chunk(table, part, cursor=_copy(state))
            if last:
                break
            page = await self._get(_instance_path(guard.follow(page.get("nextRecordsUrl"))))
        # Deletions are read from the first poll's start on (the first load has none to miss).
        mine.setdefault("deleted", started.strftime("%Y-%m-%dT%H:%M:%S+00:00"))

    async def _deleted(self, obj: str, state: dict[str, dict[str, Any]]) -> AsyncIterator[Chunk]:
        mine = state[obj]
        start = datetime.fromisoformat(mine["deleted"]) - timedelta(seconds=self.spec.overlap)
        # The API takes whole seconds: round up, so a deletion this second is inside.
        end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        try:
            body = await self._get(
                f"/services/data/{self.spec.api_version}/sobjects/{obj}/deleted/",
                start=f"{start:%Y-%m-%dT%H:%M:%S+00:00}",
                end=f"{end:%Y-%m-%dT%H:%M:%S+00:00}",
            )
        except SourceHTTPError as exc:
            if exc.status == 400 and "INVALID_REPLICATION_DATE" in str(exc):
                raise SourceHTTPError(
                    400, obj, "deletions older than Salesforce keeps: reset this connector"
                ) from None
            raise
        ids = [str(d["id"]) for d in body.get("deletedRecords", [])]
        mine["deleted"] = body.get("latestDateCovered") or mine["deleted"]
        table = OBJECTS[obj][0]
        for i in range(0, max(len(ids), 1), self.spec.chunk_rows):
            yield Chunk(table, deletes=ids[i : i + self.spec.chunk_rows], cursor=_copy(state))


def _instance_path(url: object) -> str:
    """A ``nextRecordsUrl`` as a path on the instance: it must be one (``/services/data/…``),
    never an absolute or scheme-relative URL, which would send the session's bearer token to
    another host."""
    path = str(url)
    if not path.startswith("/services/data/") or "//" in path or "/../" in path:
        raise PagingError(f"Salesforce gave a nextRecordsUrl that is not an API path: {path!r}")
    return path


def _copy(state: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {k: dict(v) for k, v in state.items()}


class SalesforceActions(ActionHandler):
    """``update_record``: PATCH fields of one Account, Contact, Opportunity or Lead (one
    attempt: the client retries, under its idempotency key, what may pass later; an unknown
    outcome is run again, the update being idempotent)."""

    def __init__(self, spec: SalesforceSpec) -> None:
        self.spec = spec
        self.session = SalesforceSession(spec)

    def descriptors(self) -> list[ActionDescriptor]:
        """The one action type and its params."""
        return [
            ActionDescriptor(
                "update_record",
                "Set fields of a record (API field names); returns its id.",
                {
                    "type": "object",
                    "properties": {
                        "object": {"enum": list(OBJECTS)},
                        "id": {"type": "string", "pattern": "^[A-Za-z0-9]{15,18}$"},
                        "fields": {"type": "object", "minProperties": 1},
                    },
                    "required": ["object", "id", "fields"],
                    "additionalProperties": False,
                },
            )
        ]

    async def execute(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        """PATCH the record (any 2xx is done, whatever its body)."""
        obj, rid = segment(params["object"]), segment(params["id"])
        path = f"/services/data/{self.spec.api_version}/sobjects/{obj}/{rid}"
        try:
            response = await self.session.request("PATCH", path, attempts=1, json=params["fields"])
            if not response.is_success:
                check(response)  # raises, with the status and the reply for the detail
        except Exception as exc:
            raise http_failure(exc, "Salesforce", reconcilable=True) from None
        return {"id": params["id"]}

    async def reconcile(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any] | None:
        """None: an update sets the same fields to the same values however often it runs, so
        after an unknown outcome it simply runs again."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.session.aclose()
