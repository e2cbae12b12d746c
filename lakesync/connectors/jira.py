"""Jira Cloud: issues, their comments and projects (REST API v3, Basic auth email + API token).

- **Issues** by JQL through ``/rest/api/3/search/jql`` (``nextPageToken`` pages), ordered by
  ``updated`` with a cursor on the greatest ``updated`` stored, re-read ``overlap`` seconds back
  (JQL compares dates to the minute, in the account's time zone: give the connector's account the
  UTC zone). Each poll then lists every issue id of the JQL (ids only, into a temporary file)
  and deletes the stored issues not listed (deleted, or moved out of the JQL's scope), with
  their comments.
- **Comments** of every issue read: inline in the search result when it carries them all, else
  paged from ``/rest/api/3/issue/{id}/comment``; a comment gone from an issue is deleted.
- **Projects** from ``/rest/api/3/project/search``: a full diff each poll, deletions included.

Rows (``jira_issues``, ``jira_comments``, ``jira_projects``) are keyed by Jira's numeric ids,
which survive an issue's move to another project (its key changes). The cursor holds the
``updated`` mark and, for issues with comments, their comment ids (what a comment's deletion
is found against); the full diffs of issues and projects compare the ids listed this poll
(spilled to a temporary file) with the gateway's stored ids, a page at a time.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import httpx

from lakesync.connector_specs import JIRA_COMMENTS, JIRA_ISSUES, JIRA_PROJECTS, JiraSpec
from lakesync.connectors._changes import split_rows
from lakesync.connectors._cursor import later, parse_time
from lakesync.connectors._http import check, request, segment
from lakesync.connectors._paging import PageGuard
from lakesync.connectors._spill import SpilledKeys
from lakesync.connectors.actions import (
    ActionDescriptor,
    ActionError,
    ActionHandler,
    http_failure,
    reply_data,
)
from lakesync.connectors.base import Chunk, Source
from lakesync.schema import TableSchema, parse_schema

__all__ = [
    "JiraActions",
    "JiraSource",
    "flatten_comment",
    "flatten_issue",
    "flatten_project",
    "jql_for",
]

_Getter = Callable[[Mapping[str, Any]], Any]


def _path(*keys: str) -> _Getter:
    def get(obj: Mapping[str, Any]) -> Any:
        value: Any = obj
        for k in keys:
            if not isinstance(value, Mapping):
                return None
            value = value.get(k)
        return value

    return get


# column → (type, where it is in Jira's JSON); one table definition drives schema and flattening.
# Types as Jira documents its fields: dates-times (``2026-01-02T03:04:05.678+0000``) are
# timestamps, read into datetimes by the poller's encoding (lakesync.connectors._values).
_ISSUE: dict[str, tuple[str, _Getter]] = {
    "key": ("string", _path("key")),
    "summary": ("string", _path("fields", "summary")),
    "status": ("string", _path("fields", "status", "name")),
    "status_category": ("string", _path("fields", "status", "statusCategory", "key")),
    "issue_type": ("string", _path("fields", "issuetype", "name")),
    "priority": ("string", _path("fields", "priority", "name")),
    "project_id": ("string", _path("fields", "project", "id")),
    "project_key": ("string", _path("fields", "project", "key")),
    "assignee_account_id": ("string", _path("fields", "assignee", "accountId")),
    "assignee_name": ("string", _path("fields", "assignee", "displayName")),
    "reporter_account_id": ("string", _path("fields", "reporter", "accountId")),
    "reporter_name": ("string", _path("fields", "reporter", "displayName")),
    "labels": ("json", _path("fields", "labels")),
    "description": ("json", _path("fields", "description")),
    "created": ("timestamp", _path("fields", "created")),
    "updated": ("timestamp", _path("fields", "updated")),
    "resolution_date": ("timestamp", _path("fields", "resolutiondate")),
}
_COMMENT: dict[str, tuple[str, _Getter]] = {
    "author_account_id": ("string", _path("author", "accountId")),
    "author_name": ("string", _path("author", "displayName")),
    "body": ("json", _path("body")),
    "created": ("timestamp", _path("created")),
    "updated": ("timestamp", _path("updated")),
}
_PROJECT: dict[str, tuple[str, _Getter]] = {
    "key": ("string", _path("key")),
    "name": ("string", _path("name")),
    "project_type": ("string", _path("projectTypeKey")),
    "style": ("string", _path("style")),
    "is_private": ("boolean", _path("isPrivate")),
    "lead_account_id": ("string", _path("lead", "accountId")),
}
_FIELDS = "summary,status,issuetype,priority,project,assignee,reporter,labels,description,"
_FIELDS += "created,updated,resolutiondate,comment"


def _schema(
    table: str, columns: Mapping[str, tuple[str, _Getter]], extra: dict[str, str]
) -> TableSchema:
    cols = [{"name": n, "type": t} for n, t in extra.items()]
    cols += [{"name": n, "type": t} for n, (t, _) in columns.items()]
    return parse_schema({"table": table, "columns": cols})


SCHEMAS = (
    _schema(JIRA_ISSUES, _ISSUE, {}),
    _schema(JIRA_COMMENTS, _COMMENT, {"issue_id": "string", "issue_key": "string"}),
    _schema(JIRA_PROJECTS, _PROJECT, {}),
)


def flatten_issue(issue: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """An issue's row id and typed columns."""
    return str(issue["id"]), {name: get(issue) for name, (_, get) in _ISSUE.items()}


def flatten_comment(
    issue: Mapping[str, Any], comment: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """A comment's row id and typed columns (with its issue's id and key)."""
    row = {"issue_id": str(issue["id"]), "issue_key": issue.get("key")}
    row |= {name: get(comment) for name, (_, get) in _COMMENT.items()}
    return str(comment["id"]), row


def flatten_project(project: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A project's row id and typed columns."""
    return str(project["id"]), {name: get(project) for name, (_, get) in _PROJECT.items()}


def jql_for(user_jql: str, since: str | None, overlap: float) -> str:
    """The incremental JQL: issues updated at or after ``since`` minus ``overlap`` seconds (to
    the minute, which is all JQL compares), within ``user_jql``, oldest change first."""
    clauses = []  # Jira refuses unbounded JQL: with no restriction, every project's issues
    if since is not None:
        mark = parse_time(since) - timedelta(seconds=overlap)
        clauses.append(f'updated >= "{mark.strftime("%Y-%m-%d %H:%M")}"')
    if user_jql.strip():
        clauses.append(f"({user_jql})")
    if not clauses:
        clauses.append("project IS NOT EMPTY")
    return " AND ".join(clauses) + " ORDER BY updated ASC"


def jira_client(spec: JiraSpec) -> httpx.AsyncClient:
    """An HTTP client on the site with Basic auth (email + API token)."""
    auth = base64.b64encode(f"{spec.email}:{spec.token}".encode()).decode()
    return httpx.AsyncClient(
        base_url=spec.url.rstrip("/"),
        headers={"Authorization": f"Basic {auth}", "Accept": "application/json"},
        timeout=spec.timeout,
    )


class JiraSource(Source):
    """Jira Cloud issues, comments and projects (see the module docstring)."""

    def __init__(self, spec: JiraSpec) -> None:
        self.spec = spec
        self.http = jira_client(spec)

    async def schemas(self) -> Sequence[TableSchema]:
        """``jira_issues``, ``jira_comments``, ``jira_projects`` (as configured)."""
        return [s for s in SCHEMAS if self._wanted(s.table)]

    def _wanted(self, table: str) -> bool:
        return table == JIRA_ISSUES or (
            self.spec.comments if table == JIRA_COMMENTS else self.spec.projects
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()

    async def _get(self, path: str, **params: Any) -> Any:
        return check(await request(self.http, "GET", path, params=params))

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """Projects, then changed issues (and their comments), then deleted issues."""
        state = {
            "updated": cursor.get("updated"),
            "issues": {k: v for k, v in cursor.get("issues", {}).items() if v},
        }
        if self.spec.projects:
            async for chunk in self._projects(state):
                yield chunk
        async for chunk in self._changed_issues(state):
            yield chunk
        async for chunk in self._deleted_issues(state):
            yield chunk

    async def _projects(self, state: dict[str, Any]) -> AsyncIterator[Chunk]:
        with SpilledKeys() as seen:
            start, guard = 0, PageGuard("Jira project search")
            while True:
                page = await self._get(
                    "/rest/api/3/project/search", startAt=start, maxResults=self.spec.page_size
                )
                values = page.get("values", [])
                rows = dict(flatten_project(p) for p in values)
                last = bool(page.get("isLast", True))
                guard.page(rows, last)
                seen.add(rows)
                for part in split_rows(rows, self.spec.chunk_rows):
                    yield Chunk(JIRA_PROJECTS, part)
                if last:
                    break
                start = guard.follow(start + len(values))
            yield Chunk(JIRA_PROJECTS, keep_only=seen, cursor=_copy(state))

    async def _search(self, jql: str, fields: str) -> AsyncIterator[list[dict[str, Any]]]:
        token: str | None = None
        guard = PageGuard("Jira search")
        while True:
            params: dict[str, Any] = {"jql": jql, "maxResults": self.spec.page_size}
            params["fields"] = fields
            if token:
                params["nextPageToken"] = token
            page = await self._get("/rest/api/3/search/jql", **params)
            issues = list(page.get("issues", []))
            token = page.get("nextPageToken") or None
            last = bool(page.get("isLast", token is None))
            guard.page((str(i["id"]) for i in issues), last)
            yield issues
            if last:
                return
            token = guard.follow(token)

    async def _changed_issues(self, state: dict[str, Any]) -> AsyncIterator[Chunk]:
        jql = jql_for(self.spec.jql, state["updated"], self.spec.overlap)
        async for issues in self._search(jql, _FIELDS):
            for part in _split_list(issues, self.spec.chunk_rows):
                if self.spec.comments:
                    async for chunk in self._comments(part, state):
                        yield chunk
                rows = dict(flatten_issue(i) for i in part)
                for row in rows.values():
                    state["updated"] = later(state["updated"], row["updated"])
                yield Chunk(JIRA_ISSUES, rows, cursor=_copy(state))

    async def _comments(
        self, issues: Sequence[Mapping[str, Any]], state: dict[str, Any]
    ) -> AsyncIterator[Chunk]:
        """Every comment of ``issues``, and deletes for comments gone from them (cursor left
        to the issues' chunk that follows, so a restart re-reads these)."""
        chunk = Chunk(JIRA_COMMENTS)
        for issue in issues:
            comments = [c async for c in self._issue_comments(issue)]
            now = dict(flatten_comment(issue, c) for c in comments)
            known = state["issues"].pop(str(issue["id"]), [])
            if now:
                state["issues"][str(issue["id"])] = sorted(now)
            changes: list[tuple[str, dict[str, Any] | None]] = list(now.items())
            changes += [(c, None) for c in known if c not in now]
            for comment_id, row in changes:
                if row is None:
                    chunk.deletes.append(comment_id)
                else:
                    chunk.upserts[comment_id] = row
                if len(chunk.upserts) + len(chunk.deletes) == self.spec.chunk_rows:
                    yield chunk
                    chunk = Chunk(JIRA_COMMENTS)
        if chunk.upserts or chunk.deletes:
            yield chunk

    async def _issue_comments(self, issue: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        inline = (issue.get("fields") or {}).get("comment")
        if inline is not None and len(inline.get("comments", [])) >= inline.get("total", 0):
            for c in inline.get("comments", []):
                yield c
            return
        start, guard = 0, PageGuard(f"comments of Jira issue {issue['id']}")
        seen: set[str] = set()
        while True:
            page = await self._get(
                f"/rest/api/3/issue/{segment(issue['id'])}/comment",
                startAt=start,
                maxResults=self.spec.page_size,
            )
            comments = page.get("comments", [])
            ids = [str(c["id"]) for c in comments]
            last = start + len(comments) >= page.get("total", 0)
            # Offsets shift when comments come and go between pages: an id met before is
            # skipped, and a page of none but those is no progress.
            guard.page(set(ids) - seen, last)
            for cid, c in zip(ids, comments, strict=True):
                if cid not in seen:
                    seen.add(cid)
                    yield c
            if last:
                return
            start = guard.follow(start + len(comments))

    async def _deleted_issues(self, state: dict[str, Any]) -> AsyncIterator[Chunk]:
        """Issues gone from the JQL: their comments (known from the cursor), then every stored
        issue not listed now (the poller pages through the stored ids)."""
        with SpilledKeys() as seen:
            async for issues in self._search(jql_for(self.spec.jql, None, 0), "id"):
                seen.add(str(i["id"]) for i in issues)
            gone = seen.missing(list(state["issues"]))
            comments = [c for issue_id in gone for c in state["issues"].pop(issue_id)]
            for ids in _split_ids(comments, self.spec.chunk_rows):
                yield Chunk(JIRA_COMMENTS, deletes=ids)
            yield Chunk(JIRA_ISSUES, keep_only=seen, cursor=_copy(state))


def _copy(state: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "updated": state["updated"],
        "issues": {k: list(v) for k, v in state["issues"].items()},
    }


def _split_ids(ids: Sequence[str], size: int) -> list[list[str]]:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def _split_list(items: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _comments_path(issue: str) -> str:
    try:
        return f"/rest/api/3/issue/{segment(issue)}/comment"
    except ValueError:
        raise ActionError("VALIDATION_ERROR", "issue: not an issue id or key", False) from None


def _adf(text: str) -> dict[str, Any]:
    """Plain text as an Atlassian Document Format paragraph (what v3 bodies take)."""
    paragraph = {"type": "paragraph", "content": [{"type": "text", "text": text}]}
    return {"type": "doc", "version": 1, "content": [paragraph]}


_TEXT = {"type": "string", "minLength": 1}


ACTION_PROPERTY = "lakesync.action"
"""The comment property holding the key of the action that added the comment."""


def action_label(key: str) -> str:
    """The label ``create_issue`` puts on the issue it creates: what a retry after an unknown
    outcome looks the issue up by (``key`` is the dispatcher's hash of the idempotency key)."""
    return f"lakesync-{key[:32]}"


def _ids(body: Any) -> dict[str, Any]:
    return {k: body[k] for k in ("id", "key") if k in body} if isinstance(body, dict) else {}


class JiraActions(ActionHandler):
    """``create_issue`` and ``add_comment``, one attempt each. Each marks what it creates with
    its action's key (the issue with :func:`action_label`, the comment with the property
    :data:`ACTION_PROPERTY`), so after an unknown outcome a retry finds it instead of creating
    it again (:meth:`reconcile`)."""

    def __init__(self, spec: JiraSpec) -> None:
        self.http = jira_client(spec)
        self.reconcile_after = spec.reconcile_after

    def descriptors(self) -> list[ActionDescriptor]:
        """The two action types and their params."""
        return [
            ActionDescriptor(
                "create_issue",
                "Create an issue; returns its id and key.",
                {
                    "type": "object",
                    "properties": {
                        "projectKey": _TEXT,
                        "summary": _TEXT,
                        "issueType": _TEXT,
                        "description": {"type": "string"},
                        "labels": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["projectKey", "summary"],
                    "additionalProperties": False,
                },
            ),
            ActionDescriptor(
                "add_comment",
                "Add a plain-text comment to an issue (by id or key); returns its id.",
                {
                    "type": "object",
                    "properties": {"issue": _TEXT, "body": _TEXT},
                    "required": ["issue", "body"],
                    "additionalProperties": False,
                },
            ),
        ]

    async def execute(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        """POST the issue or the comment, marked with ``key``."""
        body: dict[str, Any]
        if action_type == "create_issue":
            fields: dict[str, Any] = {
                "project": {"key": params["projectKey"]},
                "summary": params["summary"],
                "issuetype": {"name": params.get("issueType", "Task")},
                "labels": [*params.get("labels", []), action_label(key)],
            }
            if "description" in params:
                fields["description"] = _adf(params["description"])
            path, body = "/rest/api/3/issue", {"fields": fields}
        else:
            path = _comments_path(params["issue"])
            body = {
                "body": _adf(params["body"]),
                "properties": [{"key": ACTION_PROPERTY, "value": {"key": key}}],
            }
        created = _ids(await self._send("POST", path, json=body))
        if not created:  # a 2xx whose body we could not read: done; its ids by its mark
            with contextlib.suppress(ActionError):
                created = await self.reconcile(action_type, params, key) or {}
        return created

    async def reconcile(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any] | None:
        """Look the action up by its mark: the issue labelled with it, or the issue's comment
        carrying it; None if there is none."""
        if action_type == "create_issue":
            query = {"jql": f'labels = "{action_label(key)}"', "fields": "id", "maxResults": 1}
            found = await self._send("GET", "/rest/api/3/search/jql", params=query)
            issues = (found or {}).get("issues") or []
            return _ids(issues[0]) if issues else None
        path, start = _comments_path(params["issue"]), 0
        guard = PageGuard(f"comments of Jira issue {params['issue']}")
        while True:
            query = {"startAt": start, "maxResults": 100, "expand": "properties"}
            page = await self._send("GET", path, params=query) or {}
            comments = page.get("comments", [])
            for comment in comments:
                if any(p.get("key") == ACTION_PROPERTY and p.get("value") == {"key": key}
                       for p in comment.get("properties", [])):
                    return _ids(comment)
            last = start + len(comments) >= page.get("total", 0)
            guard.page((str(c.get("id")) for c in comments), last)
            if last:
                return None
            start = guard.follow(start + len(comments))

    async def _send(self, method: str, path: str, **kw: Any) -> Any:
        """One request (no retries: see :mod:`lakesync.connectors.actions`); a 2xx's body or
        None."""
        try:
            response = await request(self.http, method, path, attempts=1, **kw)
            if not response.is_success:
                check(response)  # raises, with the status and the reply for the detail
        except Exception as exc:
            raise http_failure(exc, "Jira", reconcilable=True) from None
        return reply_data(response)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()
