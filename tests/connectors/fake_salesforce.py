"""A fake Salesforce org (REST API) serving what the Salesforce connector and actions call:

- ``POST /services/oauth2/token`` (username-password flow, form body): an access token and the
  ``instance_url``; wrong credentials are 400 ``invalid_grant``;
- ``GET /services/data/vXX.X/query?q=SOQL``: ``totalSize``, ``done``, ``records`` (with
  ``attributes``), ``nextRecordsUrl`` (``/services/data/vXX.X/query/<locator>-<offset>``) over a
  snapshot taken when the query ran; page size from ``Sforce-Query-Options: batchSize``;
- ``GET /services/data/vXX.X/sobjects/{Object}/deleted/?start=&end=``: ``deletedRecords``,
  ``earliestDateAvailable``, ``latestDateCovered``;
- ``PATCH /services/data/vXX.X/sobjects/{Object}/{Id}``: 204 (update record);
- an expired or unknown token is 401 ``INVALID_SESSION_ID``; 503 can be injected;
- ``paging_fault``: ``repeat-next`` (a query's pages all name the same ``nextRecordsUrl`` and
  are never ``done``) or any other text (every ``nextRecordsUrl`` is that text, e.g. one that
  points to another host).

SOQL subset: ``SELECT f, … FROM Object [WHERE LastModifiedDate >= 2026-01-01T00:00:00Z]
ORDER BY LastModifiedDate ASC, Id ASC``. The clock is real time, one microsecond further
on each change at least (so every change has its own stamp).
"""

from __future__ import annotations

import itertools
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.connectors.fake_http import FakeServer, Reply, Request

_SOQL = re.compile(
    r"SELECT (?P<fields>[\w, ]+) FROM (?P<obj>\w+)"
    r"(?: WHERE LastModifiedDate >= (?P<since>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ))?"
    r" ORDER BY LastModifiedDate ASC, Id ASC"
)
_PREFIX = {"Account": "001", "Contact": "003", "Opportunity": "006", "Lead": "00Q"}
_V = r"/services/data/v\d+\.\d"
_INVALID_SESSION = [{"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}]


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}+0000"


class FakeSalesforce(FakeServer):
    def __init__(self, username: str = "bot@org.example", password: str = "pw+token") -> None:
        super().__init__()
        self.login = {"client_id": "cid", "client_secret": "csecret", "username": username}
        self.login["password"] = password
        self.clock = datetime.now(UTC)
        self.records: dict[str, dict[str, dict[str, Any]]] = {o: {} for o in _PREFIX}
        self.deleted: dict[str, list[tuple[str, datetime]]] = {o: [] for o in _PREFIX}
        self.tokens: set[str] = set()
        self.cursors: dict[str, list[dict[str, Any]]] = {}
        self.counter = itertools.count(1)
        self.paging_fault = ""
        self.route("POST", r"/services/oauth2/token", self._token)
        self.route("GET", _V + r"/query", self._query)
        self.route("GET", _V + r"/query/([\w]+)-(\d+)", self._more)
        self.route("GET", _V + r"/sobjects/(\w+)/deleted/", self._deleted)
        self.route("PATCH", _V + r"/sobjects/(\w+)/(\w+)", self._update)

    # -- data ---------------------------------------------------------------------------------
    def _tick(self) -> str:
        self.clock = max(self.clock + timedelta(microseconds=1), datetime.now(UTC))
        return _stamp(self.clock)

    def add(self, obj: str, **fields: Any) -> str:
        with self.lock:
            rid = f"{_PREFIX[obj]}{next(self.counter):015d}"
            now = self._tick()
            self.records[obj][rid] = {
                "Id": rid,
                "OwnerId": "005000000000001AAA",
                "CreatedDate": now,
                "LastModifiedDate": now,
                **fields,
            }
            return rid

    def edit(self, obj: str, rid: str, **fields: Any) -> None:
        with self.lock:
            self.records[obj][rid].update(fields, LastModifiedDate=self._tick())

    def delete(self, obj: str, rid: str) -> None:
        with self.lock:
            del self.records[obj][rid]
            self._tick()
            self.deleted[obj].append((rid, self.clock))

    def expire_tokens(self) -> None:
        """Every issued access token stops working (a session timeout)."""
        with self.lock:
            self.tokens.clear()

    # -- HTTP ---------------------------------------------------------------------------------
    def authorize(self, req: Request) -> Reply | None:
        if req.path == "/services/oauth2/token":
            return None
        auth = req.headers.get("Authorization", "")
        if auth.removeprefix("Bearer ") not in self.tokens:
            return 401, _INVALID_SESSION, {}
        return None

    def _token(self, req: Request) -> Reply:
        form = req.body if isinstance(req.body, dict) else {}
        if form.get("grant_type") != "password" or any(
            form.get(k) != v for k, v in self.login.items()
        ):
            return (
                400,
                {"error": "invalid_grant", "error_description": "authentication failure"},
                {},
            )
        token = secrets.token_hex(16)
        self.tokens.add(token)
        return (
            200,
            {
                "access_token": token,
                "instance_url": self.url,
                "token_type": "Bearer",
                "id": f"{self.url}/id/00D/005",
                "issued_at": "0",
                "signature": "x",
            },
            {},
        )

    def _batch(self, req: Request) -> int:
        m = re.search(r"batchSize=(\d+)", req.headers.get("Sforce-Query-Options") or "")
        return max(200, min(2000, int(m.group(1)))) if m else 2000

    def _query(self, req: Request) -> Reply:
        m = _SOQL.fullmatch(req.query.get("q", ""))
        if m is None or m.group("obj") not in self.records:
            return 400, [{"message": "unexpected token", "errorCode": "MALFORMED_QUERY"}], {}
        obj = m.group("obj")
        fields = [f.strip() for f in m.group("fields").split(",")]
        rows = sorted(self.records[obj].values(), key=lambda r: (r["LastModifiedDate"], r["Id"]))
        if m.group("since"):
            mark = _stamp(datetime.strptime(m.group("since"), "%Y-%m-%dT%H:%M:%SZ"))
            rows = [r for r in rows if r["LastModifiedDate"] >= mark]
        snapshot = [
            {"attributes": {"type": obj, "url": f"/services/data/v60.0/sobjects/{obj}/{r['Id']}"}}
            | {f: r.get(f) for f in fields}
            for r in rows
        ]
        locator = f"01g{secrets.token_hex(6)}"
        self.cursors[locator] = snapshot
        return self._page(locator, 0, self._batch(req))

    def _page(self, locator: str, offset: int, size: int) -> Reply:
        snapshot = self.cursors[locator]
        body: dict[str, Any] = {
            "totalSize": len(snapshot),
            "done": offset + size >= len(snapshot),
            "records": snapshot[offset : offset + size],
        }
        if not body["done"]:
            body["nextRecordsUrl"] = f"/services/data/v60.0/query/{locator}-{offset + size}"
        if self.paging_fault == "repeat-next":
            body |= {"done": False, "nextRecordsUrl": f"/services/data/v60.0/query/{locator}-0"}
        elif self.paging_fault:
            body |= {"done": False, "nextRecordsUrl": self.paging_fault}
        return 200, body, {}

    def _more(self, req: Request) -> Reply:
        assert req.match is not None
        locator, offset = req.match.group(1), int(req.match.group(2))
        if locator not in self.cursors:
            return (
                400,
                [{"message": "invalid query locator", "errorCode": "INVALID_QUERY_LOCATOR"}],
                {},
            )
        return self._page(locator, offset, self._batch(req))

    def _deleted(self, req: Request) -> Reply:
        assert req.match is not None
        obj = req.match.group(1)
        start = datetime.fromisoformat(req.query["start"])
        end = datetime.fromisoformat(req.query["end"])
        if end - start > timedelta(days=30) or start < self.clock - timedelta(days=15):
            return (
                400,
                [{"message": "start date too old", "errorCode": "INVALID_REPLICATION_DATE"}],
                {},
            )
        hits = [(rid, t) for rid, t in self.deleted[obj] if start <= t <= end]
        covered = min(end, datetime.now(UTC)).replace(second=0, microsecond=0)
        return (
            200,
            {
                "deletedRecords": [{"id": rid, "deletedDate": _stamp(t)} for rid, t in hits],
                "earliestDateAvailable": _stamp(self.clock - timedelta(days=15)),
                "latestDateCovered": covered.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
            },
            {},
        )

    def _update(self, req: Request) -> Reply:
        assert req.match is not None
        obj, rid = req.match.group(1), req.match.group(2)
        if rid not in self.records.get(obj, {}):
            return (
                404,
                [{"message": "The requested resource does not exist", "errorCode": "NOT_FOUND"}],
                {},
            )
        if not isinstance(req.body, dict) or "Id" in req.body:
            return 400, [{"message": "bad body", "errorCode": "JSON_PARSER_ERROR"}], {}
        self.edit(obj, rid, **req.body)
        return 204, None, {}
