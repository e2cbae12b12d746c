r"""Connector declarations: what a connector is, validated in one place, pure (no I/O).

A connector brings an outside system's records into a gateway through the gateway's normal push
path. It is declared in ``lakesync.yaml`` under ``connectors:`` or registered at runtime with
``POST /v1/admin/connectors/{gw}``; both end up here as one typed :data:`ConnectorSpec`, tagged
by ``kind``::

    connectors:
      jira1: {kind: jira, gateway: gw1, interval: 60, url: https://x.atlassian.net,
              email: me@x.com, token: "${JIRA_TOKEN}", jql: "project = OPS"}

A connector of a kind with actions (Jira, Salesforce) also says who may run them: ``actions:``
lists :class:`ActionGrant`\s (:func:`may_run`); without one, only admin tokens may::

    actions:
      - {action: create_issue, claims: {team: [support, ops]}}   # these teams
      - {action: "*", claims: {sub: svc-sync}}                  # every action: this client

Each connector has a schema contract (``contract:``, :class:`SchemaContract`): what happens when
its source brings a column the gateway's table lacks or a value its column's type does not hold,
in dlt's vocabulary (``evolve``, ``freeze``, ``discard_row``, ``discard_value``)::

    contract: freeze                                   # both cases, every table
    contract: {columns: discard_value, data_type: discard_row,
               tables: {jira_comments: evolve}}        # per table

A string value may hold ``${VAR}`` / ``${file:PATH}`` references (:mod:`lakesync.secrets`),
resolved by :func:`resolve_secrets` when the connector starts, so the stored declaration keeps
the reference, never the secret. :func:`redact_declaration` is what admin
routes and logs show of a declaration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec

from lakesync.delta import validate_gateway_id, validate_identifier
from lakesync.errors import ConfigError, LakeSyncError, ValidationError
from lakesync.hints import explain, of_gateway
from lakesync.redaction import MASK, redact
from lakesync.secrets import REFERENCE, has_reference, resolve_references
from lakesync.tokens import parse_ttl

__all__ = [
    "ACTION_TYPES",
    "BIGQUERY_URL",
    "CONNECTOR_NAME",
    "JIRA_COMMENTS",
    "JIRA_ISSUES",
    "JIRA_PROJECTS",
    "SALESFORCE_TABLES",
    "ActionGrant",
    "BigQuerySpec",
    "CloudWatchLogsSpec",
    "ConnectorSpec",
    "ContractMode",
    "DatabaseSpec",
    "JiraSpec",
    "MysqlSpec",
    "PostgresCdcSpec",
    "PostgresSpec",
    "SalesforceSpec",
    "SchemaContract",
    "TableContract",
    "TableReadSpec",
    "connector_client_id",
    "connector_kind",
    "connector_tables",
    "contract_for",
    "may_run",
    "parse_connector",
    "parse_connectors",
    "parse_start",
    "redact_declaration",
    "resolve_secrets",
    "tables_by_gateway",
]

CONNECTOR_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""What a connector's name may be (it becomes part of its client id)."""

SECRET_KEYS = frozenset(
    {"token", "password", "client_secret", "dsn", "credentials", "secret_access_key"}
)
"""Keys whose values are credentials (a DSN may carry a password)."""


Seconds = Annotated[float, msgspec.Meta(gt=0)]

NonNegative = Annotated[float, msgspec.Meta(ge=0)]

ACTION_TYPES: dict[str, tuple[str, ...]] = {
    "jira": ("create_issue", "add_comment"),
    "salesforce": ("update_record",),
}
"""The action types of each connector kind that has actions (what its handler runs)."""


class ActionGrant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Who may run an action of a connector: ``action`` (an action type, or ``*`` for every
    one) is granted to the clients whose token carries each claim of ``claims`` with one of
    its values (a string or a list of strings; an array claim matches when any of its elements
    does). ``claims: {}`` grants every client of the gateway."""

    action: str
    claims: dict[str, str | list[str]] = msgspec.field(default_factory=dict)


def _values(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list | tuple):
        return {v for v in value if isinstance(v, str)}
    return set()


def may_run(grants: Sequence[ActionGrant], action_type: str, claims: Mapping[str, Any]) -> bool:
    """Whether a token with ``claims`` may run ``action_type`` under ``grants``: an admin
    token always may (it could grant itself anyway), a client token when a grant names the
    action (or ``*``) and each of its claims matches. No grant: clients may run nothing."""
    if claims.get("role") == "admin":
        return True
    return any(
        grant.action in ("*", action_type)
        and all(_values(claims.get(name)) & _values(want) for name, want in grant.claims.items())
        for grant in grants
    )


ContractMode = Literal["evolve", "freeze", "discard_row", "discard_value"]
"""What a schema contract does with what does not fit (dlt's modes): ``evolve`` the table,
``freeze`` (stop the poll, naming table, row and column), ``discard_row`` (refuse the row) or
``discard_value`` (keep the row without the value)."""


class TableContract(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A table's schema contract.

    ``columns``: a source column the gateway's table lacks (its first registration takes every
    column the source has): ``evolve`` adds it (nullable); ``freeze`` stops the poll naming it;
    ``discard_row`` leaves it out and refuses the rows holding a value in it; ``discard_value``
    leaves it out and drops its values.

    ``data_type``: a value the column's declared type does not hold (a type declared in
    ``lakesync.yaml`` or the admin route wins over the source's): ``evolve`` widens the column
    (to the source's type when that is a widening; an integer or decimal to the narrowest
    decimal holding both its values and the source's; else to ``string``, holding the value's
    text); ``freeze`` stops the poll naming table, row, column and expected type;
    ``discard_row`` refuses the row; ``discard_value`` stores null instead (a column declared
    ``nullable: false`` refuses the row). Refused rows and discarded values are counted
    (``rows_refused``, ``values_discarded`` in the status route and ``/metrics``) and logged
    with table, row, column and why."""

    columns: ContractMode = "evolve"
    data_type: ContractMode = "freeze"


class SchemaContract(TableContract, frozen=True):
    """A connector's contract (:class:`TableContract`) and per-table overrides (``tables``:
    gateway table → a mode for both cases, or a :class:`TableContract`)."""

    tables: dict[str, TableContract | ContractMode] = msgspec.field(default_factory=dict)


def contract_for(contract: SchemaContract | ContractMode, table: str) -> TableContract:
    """The contract of one gateway ``table`` under a connector's ``contract``."""
    if isinstance(contract, str):
        return TableContract(contract, contract)
    found = contract.tables.get(table)
    if found is None:
        return TableContract(contract.columns, contract.data_type)
    return TableContract(found, found) if isinstance(found, str) else found


BIGQUERY_URL = re.compile(r"bigquery://[A-Za-z0-9:._-]+/?(\?.*)?")
"""A bigquery connector's ``url``: ``bigquery://PROJECT``, optionally ``?endpoint=…``."""


class _Common(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind"):
    def __repr__(self) -> str:
        # Resolved specs hold credentials: never show them.
        shown = redact_declaration(msgspec.structs.asdict(self))
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    gateway: str
    """The gateway the connector pushes into."""
    interval: Seconds = 60.0
    """Seconds between the end of one poll and the start of the next."""
    chunk_rows: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500
    """Rows per push: the bound on what a poll holds in memory at once."""
    actions: list[ActionGrant] = msgspec.field(default_factory=list)
    """Who may run the kind's actions (:func:`may_run`); empty = admin tokens only."""
    contract: SchemaContract | ContractMode = SchemaContract()
    """The tables' schema contract (:class:`TableContract`): a mode for both cases, or
    ``{columns: …, data_type: …, tables: {TABLE: …}}``; default ``columns: evolve,
    data_type: freeze``."""


class JiraSpec(_Common, frozen=True, tag="jira"):
    """Jira Cloud: issues by JQL (cursor on ``updated``), their comments, and projects."""

    url: str = ""
    """The Jira Cloud site, e.g. ``https://acme.atlassian.net``."""
    email: str = ""
    """The account the API token belongs to."""
    token: str = ""
    """An API token of that account (write ``${VAR}`` or ``${file:PATH}``)."""
    jql: str = ""
    """Extra JQL ANDed with the connector's ``updated`` cursor (empty = every issue)."""
    overlap: NonNegative = 120.0
    """Seconds re-read before the cursor: JQL dates have minute precision."""
    page_size: Annotated[int, msgspec.Meta(ge=1, le=5000)] = 100
    """Issues per search page."""
    comments: bool = True
    """Also bring each issue's comments (table ``jira_comments``)."""
    projects: bool = True
    """Also mirror the projects (table ``jira_projects``)."""
    timeout: Seconds = 60.0
    """Seconds a request to the site may take (an action that times out has an unknown
    outcome: see ``reconcile_after``)."""
    reconcile_after: NonNegative = 120.0
    """Seconds after an action's unknown outcome (a timeout, a cut connection, a 5xx) before a
    retry looks the action up on the site: a request still being processed, and the search
    index, must have caught up first, or the look-up misses it and the retry runs it twice."""


class SalesforceSpec(_Common, frozen=True, tag="salesforce"):
    """Salesforce: SOQL per object with a ``LastModifiedDate`` cursor (OAuth password flow)."""

    login_url: str = "https://login.salesforce.com"
    """The OAuth login endpoint (``https://test.salesforce.com`` for a sandbox)."""
    client_id: str = ""
    """The connected app's consumer key."""
    client_secret: str = ""
    """The connected app's consumer secret (write ``${VAR}`` or ``${file:PATH}``)."""
    username: str = ""
    """The user the connector logs in as."""
    password: str = ""
    """That user's password (write ``${VAR}`` or ``${file:PATH}``)."""
    api_version: Annotated[str, msgspec.Meta(pattern=r"^v\d+\.\d$")] = "v60.0"
    """The REST API version."""
    objects: list[Literal["Account", "Contact", "Opportunity", "Lead"]] = msgspec.field(
        default_factory=lambda: ["Account", "Contact", "Opportunity", "Lead"]
    )
    """The objects brought in (tables ``sf_accounts``, ``sf_contacts``, ``sf_opportunities``,
    ``sf_leads``)."""
    overlap: NonNegative = 60.0
    """Seconds re-read before the ``LastModifiedDate`` cursor (records committed late)."""
    page_size: Annotated[int, msgspec.Meta(ge=200, le=2000)] = 2000
    """``Sforce-Query-Options: batchSize``: records per query page."""
    timeout: Seconds = 120.0
    """Seconds a request to the org may take."""


class TableReadSpec(_Common, frozen=True):
    """A table (or query) read by a cursor or by snapshot diffs: what the database sources and
    BigQuery share."""

    source_table: str = ""
    """The table (or ``schema.table``) to read."""
    table: str = ""
    """The gateway table the rows land in."""
    key: list[str] = msgspec.field(default_factory=list)
    """The columns forming the row id (joined with ``:``)."""
    columns: list[str] = msgspec.field(default_factory=list)
    """The columns to bring (empty = every column)."""
    strategy: Literal["cursor", "diff"] = "cursor"
    """``cursor``: read rows past a growing column (no deletes); ``diff``: compare full
    snapshots (deletes included)."""
    cursor_column: str = ""
    """Cursor strategy: a column that grows on every insert and update (a number or timestamp)."""
    lookback: NonNegative = 0.0
    """Cursor strategy: re-read this much below the cursor (seconds for timestamps, else units):
    rows committed late with a lower value are still found."""


class DatabaseSpec(TableReadSpec, frozen=True):
    """A table of PostgreSQL or MySQL/MariaDB read by a cursor or by snapshot diffs."""

    dsn: str = ""
    """The source database's DSN (write ``${VAR}`` or ``${file:PATH}`` for its password)."""


class PostgresSpec(DatabaseSpec, frozen=True, tag="postgres"):
    """A PostgreSQL source table."""


class MysqlSpec(DatabaseSpec, frozen=True, tag="mysql"):
    """A MySQL/MariaDB source table."""


class PostgresCdcSpec(_Common, frozen=True, tag="postgres_cdc"):
    """PostgreSQL change capture: a logical replication slot (``wal_level = logical``) decoded
    with the built-in ``test_decoding`` plugin, so deletes arrive without snapshot diffs."""

    dsn: str = ""
    """The source database's DSN; its user needs the ``REPLICATION`` attribute."""
    slot: str = ""
    """The logical replication slot (created if missing)."""
    tables: dict[str, str] = msgspec.field(default_factory=dict)
    """Source ``schema.table`` → gateway table; each source table needs a primary key."""


class BigQuerySpec(TableReadSpec, frozen=True, tag="bigquery"):
    """A BigQuery table (``source_table: dataset.table``) or query (``query:``) read by a cursor
    or by snapshot diffs, like the database sources."""

    url: str = ""
    """``bigquery://PROJECT``, optionally ``?endpoint=http://host:port`` (an emulator)."""
    query: str = ""
    """A ``select`` read instead of ``source_table`` (its result columns are the table's)."""
    credentials: str = ""
    """A service account's JSON key (``${file:PATH}``); empty = Google's default chain
    (anonymous with an ``endpoint``)."""


class CloudWatchLogsSpec(_Common, frozen=True, tag="cloudwatch_logs"):
    """CloudWatch Logs: the events of log groups, one row each, by a time cursor."""

    log_groups: list[str] = msgspec.field(default_factory=list)
    """The log groups whose events are read."""
    stream_prefixes: list[str] = msgspec.field(default_factory=list)
    """Only streams whose name starts with one of these (empty = every stream)."""
    filter_pattern: str = ""
    """A CloudWatch filter pattern (empty = every event)."""
    start: str = "1h"
    """Where the first poll starts: a duration before it (``90s``, ``15m``, ``1h``, ``7d``) or
    an ISO 8601 instant."""
    table: str = "logs"
    """The gateway table the events land in."""
    parse: Literal["text", "json"] = "text"
    """``json``: a JSON object message's top-level fields become columns too."""
    retention: str = ""
    """A duration (``7d``): rows whose event is older are deleted from the gateway each poll
    (logs are a window, not a history); empty = kept."""
    overlap: NonNegative = 300.0
    """Seconds re-read before the time cursor: events ingested late are still found."""
    region: str = ""
    """The AWS region (empty = the standard AWS chain's)."""
    endpoint: str = ""
    """A local server (moto) instead of AWS's."""
    access_key_id: str = ""
    """An explicit access key id (``${VAR}``), with ``secret_access_key``."""
    secret_access_key: str = ""
    """Explicit keys (``${VAR}``); empty = the standard AWS chain."""


ConnectorSpec = (
    JiraSpec
    | SalesforceSpec
    | PostgresSpec
    | MysqlSpec
    | PostgresCdcSpec
    | BigQuerySpec
    | CloudWatchLogsSpec
)

_REQUIRED: dict[str, tuple[str, ...]] = {
    "jira": ("url", "email", "token"),
    "salesforce": ("client_id", "client_secret", "username", "password"),
    "postgres": ("dsn", "source_table", "table", "key"),
    "mysql": ("dsn", "source_table", "table", "key"),
    "postgres_cdc": ("dsn", "slot", "tables"),
    "bigquery": ("url", "table", "key"),
    "cloudwatch_logs": ("log_groups",),
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
        raise ValidationError(f"connector {name!r}: {explain(exc, ConnectorSpec)}") from None
    try:
        validate_gateway_id(spec.gateway)
        missing = [k for k in _REQUIRED[connector_kind(spec)] if not getattr(spec, k)]
        if missing:
            raise ValidationError(f"missing {', '.join(missing)}")
        _check_kind(spec)
        _check_actions(connector_kind(spec), spec.actions)
        _check_contract(spec)
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
            raise ConfigError(f"{where}: {of_gateway(body)}{exc.message}") from None
    return out


def connector_kind(spec: ConnectorSpec) -> str:
    """The ``kind`` tag of a spec (``jira``, ``postgres``, …)."""
    return str(spec.__struct_config__.tag)


JIRA_ISSUES, JIRA_COMMENTS, JIRA_PROJECTS = "jira_issues", "jira_comments", "jira_projects"
"""The gateway tables a ``jira`` connector fills (comments and projects as configured)."""
SALESFORCE_TABLES: Mapping[str, str] = MappingProxyType({
    "Account": "sf_accounts",
    "Contact": "sf_contacts",
    "Opportunity": "sf_opportunities",
    "Lead": "sf_leads",
})
"""The gateway table a ``salesforce`` connector fills per Salesforce object."""


def connector_tables(spec: ConnectorSpec) -> list[str]:
    """The gateway tables ``spec``'s connector fills. Their schemas register at its first poll
    (the source knows the columns), so sync rules may name them before that
    (:func:`lakesync.rules.check_rules`' ``pending``)."""
    match spec:
        case JiraSpec():
            return [JIRA_ISSUES, *([JIRA_COMMENTS] if spec.comments else []),
                    *([JIRA_PROJECTS] if spec.projects else [])]
        case SalesforceSpec():
            return [SALESFORCE_TABLES[o] for o in spec.objects]
        case PostgresCdcSpec():
            return list(spec.tables.values())
        case TableReadSpec() | CloudWatchLogsSpec():
            return [spec.table]
    return []


def tables_by_gateway(connectors: Mapping[str, ConnectorSpec]) -> dict[str, set[str]]:
    """Per gateway, the tables its ``connectors`` fill (:func:`connector_tables`)."""
    out: dict[str, set[str]] = {}
    for spec in connectors.values():
        out.setdefault(spec.gateway, set()).update(connector_tables(spec))
    return out


def _check_actions(kind: str, grants: Sequence[ActionGrant]) -> None:
    known = ACTION_TYPES.get(kind, ())
    for grant in grants:
        if not known:
            raise ValidationError(f"actions: a {kind} connector has no actions")
        if grant.action != "*" and grant.action not in known:
            raise ValidationError(
                f"actions: no action {grant.action!r} (a {kind} connector has: "
                f"{', '.join(known)}, or '*' for all)"
            )


def _check_contract(spec: ConnectorSpec) -> None:
    if isinstance(spec.contract, str):
        return
    tables = connector_tables(spec)
    unknown = sorted(set(spec.contract.tables) - set(tables))
    if unknown:
        raise ValidationError(
            f"contract.tables: {', '.join(map(repr, unknown))} is not a table of this connector"
            f" (it fills: {', '.join(tables)})"
        )


def _check_kind(spec: ConnectorSpec) -> None:
    match spec:
        case TableReadSpec():
            validate_identifier(spec.table, "table")
            if spec.strategy == "cursor" and not spec.cursor_column:
                raise ValidationError("strategy 'cursor' needs cursor_column")
            if isinstance(spec, BigQuerySpec):
                _check_bigquery(spec)
        case CloudWatchLogsSpec():
            validate_identifier(spec.table, "table")
            if not has_reference(spec.start):
                parse_start(spec.start, 0.0)
            if spec.retention and not has_reference(spec.retention):
                parse_ttl(spec.retention)
        case PostgresCdcSpec():
            for table in spec.tables.values():
                validate_identifier(table, "table")
            if not re.fullmatch(r"[a-z0-9_]{1,63}", spec.slot):
                raise ValidationError("slot must match [a-z0-9_]{1,63}")
        case _:
            pass


def _check_bigquery(spec: BigQuerySpec) -> None:
    if bool(spec.source_table) == bool(spec.query):
        raise ValidationError("a bigquery connector reads source_table or query (one of them)")
    if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){1,2}", spec.source_table or "d.t"):
        raise ValidationError("source_table must be dataset.table or project.dataset.table")
    # A ``${VAR}`` url is checked once resolved (by the client that opens it).
    if not has_reference(spec.url) and not BIGQUERY_URL.fullmatch(spec.url):
        raise ValidationError("a bigquery url is bigquery://PROJECT[?endpoint=…]")


def parse_start(text: str, now: float) -> float:
    """A cloudwatch_logs ``start`` as epoch seconds: a duration before ``now`` (``1h``) or an
    ISO 8601 instant (UTC when it names no offset). Raises :class:`ValidationError`."""
    try:
        return now - parse_ttl(text)
    except ValidationError:
        pass
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            f"start {text!r} is neither a duration (30m, 1h, 7d) nor an ISO 8601 instant"
        ) from None
    return (instant if instant.tzinfo else instant.replace(tzinfo=UTC)).timestamp()


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
    if not isinstance(value, str) or not value:
        return value
    if key not in SECRET_KEYS or key == "dsn":
        return redact(value)  # a DSN's password only; any other string's credentials too
    return value if REFERENCE.fullmatch(value) else MASK


def redact_declaration(body: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration as admin routes show it: credentials replaced by ``"***"`` (in a DSN or
    any other string, the password only: :func:`lakesync.redaction.redact`) unless they are
    ``${…}`` references, which name where the secret lives."""
    return {k: _shown(k, v) for k, v in body.items()}
