"""A fake Jira Cloud (REST API v3) serving what the Jira connector and actions call, as the
documentation describes it:

- Basic auth (email + API token), 401 with ``errorMessages`` otherwise;
- ``GET /rest/api/3/search/jql``: ``jql`` (the subset below), ``fields``, ``maxResults``,
  ``nextPageToken`` (an opaque keyset token: an issue edited between pages moves behind the
  token and is returned again, none is skipped), ``isLast``; unbounded JQL is a 400;
- the ``comment`` field inline in search results with at most 3 comments and its ``total``;
- ``GET/POST /rest/api/3/issue/{id}/comment`` (``startAt`` / ``maxResults`` / ``total``);
- ``GET /rest/api/3/project/search`` (``startAt`` / ``isLast``); ``POST /rest/api/3/issue``.

JQL subset: clauses joined by AND, each ``updated >= "YYYY-MM-DD HH:mm"``, ``project = KEY``,
``project IS NOT EMPTY``, ``labels = "LABEL"``, optionally in parentheses; then optionally
``ORDER BY updated ASC``. Created issues keep their labels; created comments keep their
``properties``, listed with ``expand=properties``. Times are
UTC; each change advances the fake's clock by one second.

``paging_fault`` makes the paging misbehave as a broken or hostile API would: ``repeat-token``
(search serves its next page each time but always under the same ``nextPageToken``, never the
last page), ``never-last`` (search serves its
first page again under a fresh token, never the last), ``comment-total`` (comment listings
announce a total they never reach, serving their first page whatever ``startAt``),
``projects-never-last`` (project search serves its first page forever, never the last).
Issue ids in paths are percent-decoded, as a real server does.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from tests.connectors.fake_http import FakeServer, Reply, Request

_CLAUSE = re.compile(
    r'updated >= "(?P<since>\d{4}-\d\d-\d\d \d\d:\d\d)"|project = (?P<project>\w+)'
    r'|(?P<any>project IS NOT EMPTY)|labels = "(?P<label>[\w-]+)"'
)
INLINE_COMMENTS = 3


def _adf(text: str) -> dict[str, Any]:
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


class FakeJira(FakeServer):
    def __init__(self, email: str = "bot@example.com", token: str = "jira-api-token") -> None:
        super().__init__()
        self.credentials = base64.b64encode(f"{email}:{token}".encode()).decode()
        self.clock = datetime(2026, 1, 1, tzinfo=UTC)
        self.projects: dict[str, dict[str, Any]] = {}
        self.issues: dict[str, dict[str, Any]] = {}
        self.comments: dict[str, list[dict[str, Any]]] = {}
        self.next_id = 10_000
        self.paging_fault = ""
        self.pages_served: dict[str, int] = {}
        self.comment_properties: dict[str, list[dict[str, Any]]] = {}
        self.route("GET", r"/rest/api/3/search/jql", self._search)
        self.route("GET", r"/rest/api/3/project/search", self._project_search)
        self.route("GET", r"/rest/api/3/issue/([^/]+)/comment", self._list_comments)
        self.route("POST", r"/rest/api/3/issue/([\w-]+)/comment", self._post_comment)
        self.route("POST", r"/rest/api/3/issue", self._post_issue)

    # -- data ---------------------------------------------------------------------------------
    def _tick(self) -> str:
        self.clock += timedelta(seconds=1)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%S.000+0000")

    def _id(self) -> str:
        self.next_id += 1
        return str(self.next_id)

    def add_project(self, key: str, name: str) -> str:
        with self.lock:
            pid = self._id()
            self.projects[pid] = {
                "id": pid,
                "key": key,
                "name": name,
                "projectTypeKey": "software",
                "style": "next-gen",
                "isPrivate": False,
                "lead": {"accountId": "acc-lead", "displayName": "Lead"},
            }
            return pid

    def add_issue(self, project_key: str, summary: str, labels: list[str] | None = None) -> str:
        with self.lock:
            project = next(p for p in self.projects.values() if p["key"] == project_key)
            iid = self._id()
            now = self._tick()
            count = sum(
                1 for i in self.issues.values() if i["fields"]["project"]["key"] == project_key
            )
            self.issues[iid] = {
                "id": iid,
                "key": f"{project_key}-{count + 1}",
                "fields": {
                    "summary": summary,
                    "status": {"name": "To Do", "statusCategory": {"key": "new"}},
                    "issuetype": {"name": "Task"},
                    "priority": {"name": "Medium"},
                    "project": {"id": project["id"], "key": project_key},
                    "assignee": None,
                    "reporter": {"accountId": "acc-1", "displayName": "Ada"},
                    "labels": labels or [],
                    "description": _adf(summary),
                    "created": now,
                    "updated": now,
                    "resolutiondate": None,
                },
            }
            self.comments[iid] = []
            return iid

    def edit_issue(self, iid: str, **fields: Any) -> None:
        with self.lock:
            self.issues[iid]["fields"].update(fields, updated=self._tick())

    def delete_issue(self, iid: str) -> None:
        with self.lock:
            del self.issues[iid]
            del self.comments[iid]

    def delete_project(self, pid: str) -> None:
        with self.lock:
            del self.projects[pid]

    def add_comment(self, iid: str, text: str) -> str:
        with self.lock:
            cid = self._id()
            now = self._tick()
            self.comments[iid].append(
                {
                    "id": cid,
                    "author": {"accountId": "acc-1", "displayName": "Ada"},
                    "body": _adf(text),
                    "created": now,
                    "updated": now,
                }
            )
            self.issues[iid]["fields"]["updated"] = now
            return cid

    def delete_comment(self, iid: str, cid: str) -> None:
        with self.lock:
            self.comments[iid] = [c for c in self.comments[iid] if c["id"] != cid]
            self.issues[iid]["fields"]["updated"] = self._tick()

    # -- what the connector should end with ----------------------------------------------------
    def expected_issues(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {
                i: {
                    "key": v["key"],
                    "summary": v["fields"]["summary"],
                    "labels": v["fields"]["labels"],
                    "updated": v["fields"]["updated"],
                }
                for i, v in self.issues.items()
            }

    def expected_comments(self) -> dict[str, str]:
        with self.lock:
            return {c["id"]: iid for iid, cs in self.comments.items() for c in cs}

    # -- HTTP ---------------------------------------------------------------------------------
    def authorize(self, req: Request) -> Reply | None:
        if req.headers.get("Authorization") != f"Basic {self.credentials}":
            return (
                401,
                {"errorMessages": ["Client must be authenticated to access this resource."]},
                {},
            )
        return None

    def _search(self, req: Request) -> Reply:
        jql = req.query.get("jql", "")
        where, _, order = jql.partition(" ORDER BY ")
        if order and order.strip() != "updated ASC":
            return 400, {"errorMessages": [f"unsupported ORDER BY {order!r}"]}, {}
        clauses = [c.strip().strip("()").strip() for c in where.split(" AND ") if c.strip()]
        if not clauses:
            return 400, {"errorMessages": ["Unbounded JQL queries are not allowed here."]}, {}
        tests = []
        for c in clauses:
            m = _CLAUSE.fullmatch(c)
            if m is None:
                return 400, {"errorMessages": [f"Error in the JQL Query: {c!r}"]}, {}
            tests.append(m)
        limit = min(int(req.query.get("maxResults", 50)), 5000)
        fields = req.query.get("fields", "id").split(",")
        after = None
        if req.query.get("nextPageToken") and self.paging_fault == "":
            after = tuple(json.loads(base64.urlsafe_b64decode(req.query["nextPageToken"])))
        hits = sorted(
            (self._sort_key(i), i)
            for i in self.issues.values()
            if all(self._match(m, i) for m in tests)
        )
        if after is not None:
            hits = [(k, i) for k, i in hits if k > after]
        if self.paging_fault == "repeat-token":  # the next page each time, under one token
            served = self.pages_served.get(jql, 0)
            self.pages_served[jql] = served + 1
            hits = hits[served * limit :]
        page = hits[:limit]
        body: dict[str, Any] = {"issues": [self._render(i, fields) for _, i in page]}
        if len(hits) > limit:
            body["nextPageToken"] = base64.urlsafe_b64encode(
                json.dumps(page[-1][0]).encode()
            ).decode()
        body["isLast"] = len(hits) <= limit
        if self.paging_fault == "repeat-token":
            body |= {"nextPageToken": "the-same-token", "isLast": False}
        elif self.paging_fault == "never-last":
            body |= {"nextPageToken": f"fresh-{len(self.requests)}", "isLast": False}
        return 200, body, {}

    @staticmethod
    def _sort_key(issue: dict[str, Any]) -> tuple[str, int, str]:
        iid = issue["id"]
        return issue["fields"]["updated"], int(iid) if iid.isdigit() else 0, iid

    @staticmethod
    def _match(m: re.Match[str], issue: dict[str, Any]) -> bool:
        if m.group("since"):
            mark = datetime.strptime(m.group("since"), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            updated = datetime.strptime(issue["fields"]["updated"], "%Y-%m-%dT%H:%M:%S.%f%z")
            return updated >= mark
        if m.group("project"):
            return bool(issue["fields"]["project"]["key"] == m.group("project"))
        if m.group("label"):
            return m.group("label") in issue["fields"]["labels"]
        return True

    def _render(self, issue: dict[str, Any], fields: list[str]) -> dict[str, Any]:
        out = {
            "id": issue["id"],
            "key": issue["key"],
            "self": f"{self.url}/rest/api/3/issue/{issue['id']}",
        }
        if fields == ["id"]:
            return out
        shown = {k: v for k, v in issue["fields"].items() if k in fields or "*all" in fields}
        if "comment" in fields:
            cs = self.comments[issue["id"]]
            shown["comment"] = {
                "comments": cs[:INLINE_COMMENTS],
                "maxResults": INLINE_COMMENTS,
                "total": len(cs),
                "startAt": 0,
            }
        return out | {"fields": json.loads(json.dumps(shown))}

    def _list_comments(self, req: Request) -> Reply:
        assert req.match is not None
        ref = unquote(req.match.group(1))
        iid = next((i for i, v in self.issues.items() if ref in (i, v["key"])), ref)
        if iid not in self.comments:
            return (
                404,
                {
                    "errorMessages": [
                        "Issue does not exist or you do not have permission to see it."
                    ]
                },
                {},
            )
        start = int(req.query.get("startAt", 0))
        limit = min(int(req.query.get("maxResults", 50)), 100)
        cs = self.comments[iid]
        if "properties" in req.query.get("expand", "").split(","):
            cs = [c | {"properties": self.comment_properties.get(c["id"], [])} for c in cs]
        total = len(cs)
        if self.paging_fault == "comment-total":
            start, total = 0, 10**6
        return (
            200,
            {
                "comments": cs[start : start + limit],
                "startAt": start,
                "maxResults": limit,
                "total": total,
            },
            {},
        )

    def _project_search(self, req: Request) -> Reply:
        start = int(req.query.get("startAt", 0))
        if self.paging_fault == "projects-never-last":
            start = 0
        limit = min(int(req.query.get("maxResults", 50)), 100)
        values = sorted(self.projects.values(), key=lambda p: int(p["id"]))
        return (
            200,
            {
                "values": values[start : start + limit],
                "startAt": start,
                "maxResults": limit,
                "total": len(values),
                "isLast": start + limit >= len(values)
                and self.paging_fault != "projects-never-last",
            },
            {},
        )

    def _post_issue(self, req: Request) -> Reply:
        fields = req.body.get("fields", {}) if isinstance(req.body, dict) else {}
        key = (fields.get("project") or {}).get("key")
        if not fields.get("summary") or key not in {p["key"] for p in self.projects.values()}:
            return (
                400,
                {"errorMessages": [], "errors": {"project": "valid project is required"}},
                {},
            )
        iid = self.add_issue(key, fields["summary"], list(fields.get("labels") or []))
        return (
            201,
            {
                "id": iid,
                "key": self.issues[iid]["key"],
                "self": f"{self.url}/rest/api/3/issue/{iid}",
            },
            {},
        )

    def _post_comment(self, req: Request) -> Reply:
        assert req.match is not None
        ref = req.match.group(1)
        iid = next((i for i, v in self.issues.items() if ref in (i, v["key"])), None)
        if iid is None:
            return (
                404,
                {
                    "errorMessages": [
                        "Issue does not exist or you do not have permission to see it."
                    ]
                },
                {},
            )
        body = req.body.get("body") if isinstance(req.body, dict) else None
        if not isinstance(body, dict):
            return 400, {"errorMessages": ["Comment body can not be empty!"]}, {}
        cid = self.add_comment(iid, "")
        self.comments[iid][-1]["body"] = body
        self.comment_properties[cid] = list(req.body.get("properties") or [])
        return 201, self.comments[iid][-1], {}
