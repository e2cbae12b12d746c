"""Connector declarations: what a connector is, validated in one place, pure (no I/O).

A connector brings an outside system's records into a gateway through the gateway's normal push
path. It is declared in ``lakesync.yaml`` under ``connectors:`` or registered at runtime with
``POST /v1/admin/connectors/{gw}``; both end up here as one typed :data:`ConnectorSpec`, tagged
by ``kind``::

    connectors:
      jira1: {kind: jira, gateway: gw1, interval: 60, url: https://x.atlassian.net,
              email: me@x.com, token: "${JIRA_TOKEN}", jql: "project = OPS"}

A string value may hold ``${VAR}`` / ``${file:PATH}`` references (:mod:`lakesync.secrets`),
resolved by :func:`resolve_secrets` when the connector starts, so the stored declaration keeps
the reference, never the secret. :func:`redact` is what admin routes
and logs show of a declaration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import msgspec

from lakesync.delta import validate_gateway_id, validate_identifier
from lakesync.destination_specs import redact_url
from lakesync.errors import ConfigError, LakeSyncError, ValidationError
from lakesync.secrets import REFERENCE, has_reference, resolve_references

__all__ = [
    "CONNECTOR_NAME",
    "ConnectorSpec",
    "DatabaseSpec",
    "JiraSpec",
    "MysqlSpec",
    "PostgresCdcSpec",
    "PostgresSpec",
    "SalesforceSpec",
    "connector_client_id",
    "connector_kind",
    "parse_connector",
    "parse_connectors",
    "redact",
    "resolve_secrets",
]

CONNECTOR_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""What a connector's name may be (it becomes part of its client id)."""

SECRET_KEYS = frozenset({"token", "password", "client_secret", "dsn"})
"""Keys whose values are credentials (a DSN may carry a password)."""


Seconds = Annotated[float, msgspec.Meta(gt=0)]

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class _Common(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind"):
    def __repr__(self) -> str:
        # Resolved specs hold credentials: never show them.
        shown = redact(msgspec.structs.asdict(self))
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    gateway: str
    interval: Seconds = 60.0
    """Seconds between the end of one poll and the start of the next."""
    chunk_rows: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500
    """Rows per push: the bound on what a poll holds in memory at once."""


class JiraSpec(_Common, frozen=True, tag="jira"):
    """Jira Cloud: issues by JQL (cursor on ``updated``), their comments, and projects."""

    url: str = ""
    email: str = ""
    token: str = ""
    jql: str = ""
    """Extra JQL ANDed with the connector's ``updated`` cursor (empty = every issue)."""
    overlap: NonNegative = 120.0
    """Seconds re-read before the cursor: JQL dates have minute precision."""
    page_size: Annotated[int, msgspec.Meta(ge=1, le=5000)] = 100
    comments: bool = True
    projects: bool = True


class SalesforceSpec(_Common, frozen=True, tag="salesforce"):
    """Salesforce: SOQL per object with a ``LastModifiedDate`` cursor (OAuth password flow)."""

    login_url: str = "https://login.salesforce.com"
    client_id: str = ""
    client_secret: str = ""
    username: str = ""
    password: str = ""
    api_version: Annotated[str, msgspec.Meta(pattern=r"^v\d+\.\d$")] = "v60.0"
    objects: list[Literal["Account", "Contact", "Opportunity", "Lead"]] = msgspec.field(
        default_factory=lambda: ["Account", "Contact", "Opportunity", "Lead"]
    )
    overlap: NonNegative = 60.0
    """Seconds re-read before the ``LastModifiedDate`` cursor (records committed late)."""
    page_size: Annotated[int, msgspec.Meta(ge=200, le=2000)] = 2000
    """``Sforce-Query-Options: batchSize``: records per query page."""


class DatabaseSpec(_Common, frozen=True):
    """A table of PostgreSQL or MySQL/MariaDB read by a cursor or by snapshot diffs."""

    dsn: str = ""
    source_table: str = ""
    """The table (or ``schema.table``) to read."""
    table: str = ""
    """The gateway table the rows land in."""
    key: list[str] = msgspec.field(default_factory=list)
    """The columns forming the row id (joined with ``:``)."""
    columns: list[str] = msgspec.field(default_factory=list)
    """The columns to bring (empty = every column)."""
    strategy: Literal["cursor", "diff"] = "cursor"
    cursor_column: str = ""
    """Cursor strategy: a column that grows on every insert and update (a number or timestamp)."""
    lookback: NonNegative = 0.0
    """Cursor strategy: re-read this much below the cursor (seconds for timestamps, else units):
    rows committed late with a lower value are still found."""


class PostgresSpec(DatabaseSpec, frozen=True, tag="postgres"):
    """A PostgreSQL source table."""


class MysqlSpec(DatabaseSpec, frozen=True, tag="mysql"):
    """A MySQL/MariaDB source table."""


class PostgresCdcSpec(_Common, frozen=True, tag="postgres_cdc"):
    """PostgreSQL change capture: a logical replication slot (``wal_level = logical``) decoded
    with the built-in ``test_decoding`` plugin, so deletes arrive without snapshot diffs."""

    dsn: str = ""
    slot: str = ""
    tables: dict[str, str] = msgspec.field(default_factory=dict)
    """Source ``schema.table`` → gateway table; each source table needs a primary key."""


ConnectorSpec = JiraSpec | SalesforceSpec | PostgresSpec | MysqlSpec | PostgresCdcSpec

_REQUIRED: dict[str, tuple[str, ...]] = {
    "jira": ("url", "email", "token"),
    "salesforce": ("client_id", "client_secret", "username", "password"),
    "postgres": ("dsn", "source_table", "table", "key"),
    "mysql": ("dsn", "source_table", "table", "key"),
    "postgres_cdc": ("dsn", "slot", "tables"),
}


def connector_client_id(name: str) -> str:
    """The client id a connector's deltas carry: reserved for gateways, so no client can push
    as a connector."""
    return f"lakesync-gateway-connector-{name}"


def parse_connector(name: str, body: Mapping[str, Any]) -> ConnectorSpec:
    """Validate one declaration (``kind`` or, as the admin API names it, ``type``; a ``name``
    key, if present, must equal ``name``). Raises :class:`ValidationError` naming the problem."""
    if not CONNECTOR_NAME.fullmatch(name):
        raise ValidationError("connector name must match [A-Za-z0-9_.-]{1,128}")
    data = {k: v for k, v in body.items() if k not in ("name", "type")}
    if "kind" not in data and "type" in body:
        data["kind"] = body["type"]
    if body.get("name", name) != name:
        raise ValidationError(f"connector {name!r}: name {body.get('name')!r} differs")
    try:
        spec: ConnectorSpec = msgspec.convert(data, ConnectorSpec)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"connector {name!r}: {exc}") from None
    try:
        validate_gateway_id(spec.gateway)
        missing = [k for k in _REQUIRED[connector_kind(spec)] if not getattr(spec, k)]
        if missing:
            raise ValidationError(f"missing {', '.join(missing)}")
        _check_kind(spec)
    except LakeSyncError as exc:
        raise ValidationError(f"connector {name!r}: {exc.message}") from None
    return spec


def parse_connectors(raw: Mapping[str, Any], where: str) -> dict[str, ConnectorSpec]:
    """The ``connectors:`` section of ``lakesync.yaml``; ``where`` (the file) prefixes every
    :class:`ConfigError`."""
    out: dict[str, ConnectorSpec] = {}
    for name, body in raw.items():
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: connector {name!r} must be a mapping")
        try:
            out[str(name)] = parse_connector(str(name), body)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {exc.message}") from None
    return out


def connector_kind(spec: ConnectorSpec) -> str:
    """The ``kind`` tag of a spec (``jira``, ``postgres``, …)."""
    return str(spec.__struct_config__.tag)


def _check_kind(spec: ConnectorSpec) -> None:
    match spec:
        case DatabaseSpec():
            validate_identifier(spec.table, "table")
            if spec.strategy == "cursor" and not spec.cursor_column:
                raise ValidationError("strategy 'cursor' needs cursor_column")
        case PostgresCdcSpec():
            for table in spec.tables.values():
                validate_identifier(table, "table")
            if not re.fullmatch(r"[a-z0-9_]{1,63}", spec.slot):
                raise ValidationError("slot must match [a-z0-9_]{1,63}")
        case _:
            pass


def resolve_secrets(
    spec: ConnectorSpec, env: Mapping[str, str], read_file: Callable[[str], str]
) -> ConnectorSpec:
    """``spec`` with the ``${VAR}`` / ``${file:PATH}`` references (:mod:`lakesync.secrets`) in
    its string values resolved. Raises :class:`ConfigError` naming the variable or file (never
    its value)."""
    changes = {
        field.name: resolve_references(value, env, read_file)
        for field in msgspec.structs.fields(spec)
        if isinstance(value := getattr(spec, field.name), str) and has_reference(value)
    }
    return msgspec.structs.replace(spec, **changes)


def _shown(key: str, value: Any) -> Any:
    if key not in SECRET_KEYS or not isinstance(value, str) or not value:
        return value
    if key == "dsn":
        return redact_url(value)
    return value if REFERENCE.fullmatch(value) else "***"


def redact(body: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration as admin routes show it: credentials replaced by ``"***"`` (a DSN's
    password only) unless they are ``${…}`` references, which name where the secret lives."""
    return {k: _shown(k, v) for k, v in body.items()}
