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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

from lakesync.connector_specs import JiraSpec
from lakesync.connectors._changes import split_rows
from lakesync.connectors._cursor import later, parse_time
from lakesync.connectors._http import check, request
from lakesync.connectors._spill import SpilledKeys
from lakesync.connectors.actions import ActionDescriptor, ActionHandler, http_failure
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
    "created": ("string", _path("fields", "created")),
    "updated": ("string", _path("fields", "updated")),
    "resolution_date": ("string", _path("fields", "resolutiondate")),
}
_COMMENT: dict[str, tuple[str, _Getter]] = {
    "author_account_id": ("string", _path("author", "accountId")),
    "author_name": ("string", _path("author", "displayName")),
    "body": ("json", _path("body")),
    "created": ("string", _path("created")),
    "updated": ("string", _path("updated")),
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
    _schema("jira_issues", _ISSUE, {}),
    _schema("jira_comments", _COMMENT, {"issue_id": "string", "issue_key": "string"}),
    _schema("jira_projects", _PROJECT, {}),
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
        timeout=60.0,
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
        return table == "jira_issues" or (
            self.spec.comments if table == "jira_comments" else self.spec.projects
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
            start = 0
            while True:
                page = await self._get(
                    "/rest/api/3/project/search", startAt=start, maxResults=self.spec.page_size
                )
                values = page.get("values", [])
                rows = dict(flatten_project(p) for p in values)
                seen.add(rows)
                for part in split_rows(rows, self.spec.chunk_rows):
                    yield Chunk("jira_projects", part)
                start += len(values)
                if page.get("isLast", True) or not values:
                    break
            yield Chunk("jira_projects", keep_only=seen, cursor=_copy(state))

    async def _search(self, jql: str, fields: str) -> AsyncIterator[list[dict[str, Any]]]:
        token: str | None = None
        while True:
            params: dict[str, Any] = {"jql": jql, "maxResults": self.spec.page_size}
            params["fields"] = fields
            if token:
                params["nextPageToken"] = token
            page = await self._get("/rest/api/3/search/jql", **params)
            yield list(page.get("issues", []))
            token = page.get("nextPageToken")
            if page.get("isLast", token is None) or not token:
                return

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
                yield Chunk("jira_issues", rows, cursor=_copy(state))

    async def _comments(
        self, issues: Sequence[Mapping[str, Any]], state: dict[str, Any]
    ) -> AsyncIterator[Chunk]:
        """Every comment of ``issues``, and deletes for comments gone from them (cursor left
        to the issues' chunk that follows, so a restart re-reads these)."""
        chunk = Chunk("jira_comments")
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
                    chunk = Chunk("jira_comments")
        if chunk.upserts or chunk.deletes:
            yield chunk

    async def _issue_comments(self, issue: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        inline = (issue.get("fields") or {}).get("comment")
        if inline is not None and len(inline.get("comments", [])) >= inline.get("total", 0):
            for c in inline.get("comments", []):
                yield c
            return
        start = 0
        while True:
            page = await self._get(
                f"/rest/api/3/issue/{issue['id']}/comment",
                startAt=start,
                maxResults=self.spec.page_size,
            )
            comments = page.get("comments", [])
            for c in comments:
                yield c
            start += len(comments)
            if not comments or start >= page.get("total", 0):
                return

    async def _deleted_issues(self, state: dict[str, Any]) -> AsyncIterator[Chunk]:
        """Issues gone from the JQL: their comments (known from the cursor), then every stored
        issue not listed now (the poller pages through the stored ids)."""
        with SpilledKeys() as seen:
            async for issues in self._search(jql_for(self.spec.jql, None, 0), "id"):
                seen.add(str(i["id"]) for i in issues)
            gone = seen.missing(list(state["issues"]))
            comments = [c for issue_id in gone for c in state["issues"].pop(issue_id)]
            for ids in _split_ids(comments, self.spec.chunk_rows):
                yield Chunk("jira_comments", deletes=ids)
            yield Chunk("jira_issues", keep_only=seen, cursor=_copy(state))


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


def _adf(text: str) -> dict[str, Any]:
    """Plain text as an Atlassian Document Format paragraph (what v3 bodies take)."""
    paragraph = {"type": "paragraph", "content": [{"type": "text", "text": text}]}
    return {"type": "doc", "version": 1, "content": [paragraph]}


_TEXT = {"type": "string", "minLength": 1}


class JiraActions(ActionHandler):
    """``create_issue`` and ``add_comment`` (one attempt each: the client retries, under its
    idempotency key, what may pass on a second try)."""

    def __init__(self, spec: JiraSpec) -> None:
        self.http = jira_client(spec)

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

    async def execute(self, action_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """POST the issue or the comment."""
        if action_type == "create_issue":
            fields: dict[str, Any] = {
                "project": {"key": params["projectKey"]},
                "summary": params["summary"],
                "issuetype": {"name": params.get("issueType", "Task")},
                "labels": params.get("labels", []),
            }
            if "description" in params:
                fields["description"] = _adf(params["description"])
            path, body = "/rest/api/3/issue", {"fields": fields}
        else:
            path = f"/rest/api/3/issue/{quote(params['issue'], safe='')}/comment"
            body = {"body": _adf(params["body"])}
        try:
            created = check(await request(self.http, "POST", path, json=body, attempts=1))
        except Exception as exc:
            raise http_failure(exc) from None
        return {k: created[k] for k in ("id", "key") if k in created}

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()
