"""``lakesync.yaml`` and the environment: the one place configuration is read and validated.

The file is optional; without it LakeSync runs on embedded defaults (one data directory holding
the hot log, the Iceberg catalog and warehouse). Every key can be set in the file and is
overridden by its environment variable; an empty variable counts as unset:

- ``LAKESYNC_CONFIG``: path of the config file (default ``./lakesync.yaml`` if present)
- ``data_dir`` / ``LAKESYNC_DATA_DIR``: data directory (default ``./.lakesync``)
- ``store_url`` / ``LAKESYNC_STORE_URL``: hot-log store, ``sqlite`` (default) or a
  ``postgresql://`` DSN; ``pg_schema`` / ``LAKESYNC_PG_SCHEMA``: its PostgreSQL schema
- ``shards:``: further hot-log stores, each holding the tables it lists
  (:mod:`lakesync.shard_specs`); every other table stays in ``store_url``
- ``store:`` (:class:`StoreConfig`, the PostgreSQL hot-log store's session limits),
  ``server:`` (:class:`ServerConfig`, the gateway) and ``lake:`` (:class:`LakeConfig`): each key
  is overridden by ``LAKESYNC_`` + the key in capitals, e.g. ``server.rate_limit`` by
  ``LAKESYNC_RATE_LIMIT`` and ``lake.catalog_uri`` by ``LAKESYNC_CATALOG_URI``
- ``destinations:``: where synced tables are materialised (:mod:`lakesync.destination_specs`); URLs
  may take credentials from ``${VAR}`` / ``${file:PATH}``
- ``connectors:``: outside systems polled into a gateway (:mod:`lakesync.connector_specs`), by name;
  credentials likewise from ``${VAR}`` / ``${file:PATH}``
- ``LAKESYNC_JWT_SECRET`` / ``LAKESYNC_JWT_SECRET_PREVIOUS``: token secrets (rotation), from the
  environment only, so they stay out of files that get committed

Unknown keys and invalid values are a :class:`ConfigError` naming the file and the key, or the
variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
import msgspec.inspect
import yaml

from lakesync.connector_specs import ConnectorSpec, parse_connectors
from lakesync.delta import validate_gateway_id
from lakesync.destination_specs import DestinationSpec, parse_destinations
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.hints import explain
from lakesync.rules import SyncRules, parse_rules
from lakesync.schema import TableSchema, parse_schema
from lakesync.secrets import resolved_values
from lakesync.shard_specs import ShardSpec, parse_shards

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "MIB",
    "Config",
    "GatewayConfig",
    "LakeConfig",
    "ServerConfig",
    "StoreConfig",
    "apply_environment",
    "declared_secrets",
    "load_config",
]

DEFAULT_CONFIG_FILE = "lakesync.yaml"
MIB = 1024 * 1024

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
HostName = Annotated[
    str,
    # A DNS name or an IPv4 address, or an IPv6 address; no scheme, port or spaces.
    msgspec.Meta(
        pattern=r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?"
        r"|[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)$"
    ),
]


_ORIGIN = re.compile(
    # What a browser sends as Origin: scheme, host (a name, an IPv4 or a bracketed IPv6), port.
    r"[a-z][a-z0-9+.-]*://(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?",
    re.IGNORECASE,
)


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``store:``: limits on the sessions of a PostgreSQL hot-log store (a SQLite store ignores
    them), so that one gateway process that stops answering cannot stop the others' writes.
    Seconds; 0 turns a limit off (PostgreSQL's or the operating system's default then holds)."""

    pg_idle_in_transaction_timeout: NonNegative = 5.0
    """A session idle inside a transaction this long is ended by PostgreSQL, which releases the
    write lock a frozen or cut-off process held; that process's transaction fails and its
    pushes are not acknowledged. Bounds how long the other processes' writes can stall."""
    pg_lock_timeout: NonNegative = 10.0
    """Longest wait for a lock (the store's write lock included) before the statement fails
    with 503; above ``pg_idle_in_transaction_timeout`` so that writers queued behind a frozen
    holder outlast it instead of failing with it."""
    pg_statement_timeout: NonNegative = 30.0
    """Longest run of one statement (lock waits included) before PostgreSQL cancels it."""
    pg_keepalives_idle: NonNegative = 5.0
    """TCP keepalive: idle seconds before the first probe on a store connection (both ends: the
    gateway's and the server's), so a dead peer is noticed in seconds, not hours."""
    pg_keepalives_interval: NonNegative = 2.0
    """TCP keepalive: seconds between unanswered probes."""
    pg_keepalives_count: Count = 3
    """TCP keepalive: unanswered probes before the connection is dropped."""
    pg_tcp_user_timeout: NonNegative = 10.0
    """Longest time data sent on a store connection may stay unacknowledged by the peer before
    the connection is dropped (Linux ``TCP_USER_TIMEOUT``, both ends)."""
    pg_pool_timeout: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """Longest wait for a store connection (every pooled one busy, or the server unreachable)
    before a request answers 503."""


class ServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``server:``: where ``lakesync up`` listens, its limits and its lake jobs."""

    host: str = "127.0.0.1"
    """Interface ``lakesync up`` listens on (``--host`` wins)."""
    port: int = 8787
    """TCP port of the gateway (``--port`` wins)."""
    rate_limit: NonNegative = 0.0
    """Pushes + pulls per second per client (0 = off), with bursts of ``rate_burst``."""
    rate_burst: NonNegative = 20.0
    """Requests a client may make at once before ``rate_limit`` paces it (429 with
    ``Retry-After``)."""
    backpressure_bytes: Count = 1024 * MIB
    """Un-flushed hot-log size that turns pushes away with 503 (0 = off)."""
    ws_max_connections: Count = 10_000
    """Open WebSockets across all gateways (0 = no cap); past it a handshake is closed 1013."""
    ws_max_connections_per_gateway: Count = 5_000
    """Open WebSockets of one gateway (0 = no cap), so one tenant cannot take every slot."""
    ws_max_connections_per_client: Count = 20
    """Open WebSockets of one client (token ``sub``) on a gateway (0 = no cap)."""
    ws_send_queue_bytes: Count = 4 * MIB
    """Bytes of broadcasts a WebSocket's send queue holds (0 = only its 1,024-frame cap); a
    receiver whose queue would overflow is closed with 4408 and resumes by pull."""
    ws_ping_interval: NonNegative = 20.0
    """Seconds between the keepalive pings the gateway sends each WebSocket (0 = none); a peer
    that has not answered one within as long again is closed. At thousands of idle connections
    the pings are most of an idle gateway's CPU: raise it there."""
    ws_rate_limit: NonNegative = 100.0
    """Frames per second per WebSocket connection (0 = off), burst twice that and at least 5."""
    flush_interval: NonNegative = 5.0
    """Seconds between landing flushes (0 = only on ``POST /v1/admin/flush/{gw}``)."""
    pipeline_interval: NonNegative = 0.0
    """Seconds between scheduled ``lakesync pipeline run`` subprocesses (0 = off)."""
    hot_log_retention: NonNegative = 7 * 86_400.0
    """Seconds a delta stays in the hot log once it is in the landing table and a checkpoint:
    clients offline longer re-sync from the checkpoint (``CURSOR_EXPIRED``)."""
    compaction_interval: NonNegative = 86_400.0
    """Seconds between scheduled ``lakesync compact`` runs (Iceberg maintenance, 0 = off)."""
    docs: bool = True
    """Serve the OpenAPI docs (``/docs``: Swagger UI, its assets from a CDN; the JSON schema at
    ``/docs/openapi.json``); false = no ``/docs`` routes."""
    metrics_gateway_labels: bool = True
    """Label ``/metrics`` counters by gateway id; false = totals only (no tenant ids exposed)."""
    cors_origins: str | list[str] = "*"
    """Origins whose web pages may call the sync API (``/v1/sync/…``: CORS) and open its
    WebSocket: ``"*"`` (any origin), one origin, or a list such as ``[https://app.example.com,
    http://localhost:5173]`` (each ``scheme://host[:port]`` as a browser sends it in ``Origin``;
    ``[]`` = none). In the environment: ``*``, or the origins separated by commas. Any origin by
    default: the sync API reads a bearer token on every request, never a cookie, so a page
    elsewhere gets nothing it does not already hold the token for. The console and admin routes
    never answer another origin, whatever this says."""

    def __post_init__(self) -> None:
        origins = [self.cors_origins] if isinstance(self.cors_origins, str) else self.cors_origins
        for origin in origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"cors_origins: {origin!r} is not an origin; write scheme://host[:port] "
                    "without a path or a trailing slash (https://app.example.com, "
                    "http://localhost:5173), or '*' for any origin"
                )


class LakeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``lake:``: catalog, warehouse, Spark target, jars and dbt project.

    Unset values are derived by ``lakesync.lakehouse.settings.LakeSettings`` (embedded SQLite
    catalog and warehouse under the data dir, jars inside the active environment, the dbt
    project the package carries).
    """

    catalog_uri: str | None = None
    """``jdbc:sqlite:...`` or ``jdbc:postgresql://host:port/db`` (a JDBC catalog), or
    ``http(s)://...`` (an Iceberg REST catalog); unset: ``jdbc:sqlite:`` on ``catalog.db`` in the
    data dir."""
    catalog_user: str | None = None
    """User of a PostgreSQL catalog."""
    catalog_password: str | None = None
    """Password of a PostgreSQL catalog (better set in the environment than in the file;
    ``${VAR}`` / ``${file:PATH}`` references are resolved)."""
    catalog_warehouse: str | None = None
    """REST catalog: the warehouse name the catalog serves (Polaris' catalog, Lakekeeper's
    warehouse...); unset: none sent."""
    catalog_credential: str | None = None
    """REST catalog: OAuth2 client credentials ``client_id:client_secret``, exchanged for a token
    (``${VAR}`` / ``${file:PATH}`` references are resolved)."""
    catalog_token: str | None = None
    """REST catalog: a bearer token, instead of ``catalog_credential`` (``${VAR}`` /
    ``${file:PATH}`` references are resolved)."""
    warehouse: str | None = None
    """Warehouse URI every Spark worker reaches: ``file:///…`` or ``s3://bucket/prefix`` (object
    storage, with the ``s3_*`` keys; the bucket must exist: the start refuses a missing one,
    naming it). Unset: ``warehouse/`` in the data dir. With a REST catalog the catalog's own
    warehouse decides where tables go: set, it must be that warehouse (the start refuses
    another, in one line), unset, the catalog's is used."""
    s3_endpoint: str | None = None
    """URL of an S3-compatible endpoint for an ``s3://`` warehouse (``http://host:9000``);
    unset: AWS S3."""
    s3_region: str | None = None
    """Region of the ``s3://`` warehouse; unset: ``AWS_REGION`` / the AWS profile, else the
    bucket's own on AWS S3."""
    s3_path_style: bool = False
    """Address buckets as ``endpoint/bucket/key`` (most S3-compatible servers) rather than
    ``bucket.endpoint/key`` (AWS S3's virtual-hosted style)."""
    s3_create_bucket: bool = False
    """Create the ``s3://`` warehouse's bucket when it does not exist (at the start of ``lakesync
    up``, ``pipeline run``...); unset, a missing bucket refuses the start, naming it."""
    s3_access_key_id: str | None = None
    """Access key id for the ``s3://`` warehouse (``${VAR}`` / ``${file:PATH}`` allowed); unset:
    the AWS environment variables and profile chain."""
    s3_secret_access_key: str | None = None
    """Secret access key for the ``s3://`` warehouse (``${VAR}`` / ``${file:PATH}`` allowed, and
    better than the key itself in the file); unset: the AWS chain."""
    spark_master: Annotated[str, msgspec.Meta(min_length=1)] = "local[2]"
    """Spark master: ``local[N]`` in-process, or ``spark://host:port`` of a standalone cluster."""
    spark_cores_max: Count | None = None
    """``spark.cores.max``: cores the pipeline takes from a cluster (unset: Spark's default)."""
    spark_executor_memory: str | None = None
    """``spark.executor.memory`` on a cluster, e.g. ``2g`` (unset: Spark's default)."""
    spark_driver_host: HostName | None = None
    """``spark.driver.host``: the name or address of this machine that a cluster's executors
    connect back to (the driver also binds it). Unset: Spark's choice, the machine's address
    (loopback with a ``local[N]`` master)."""
    spark_driver_port: Port | None = None
    """``spark.driver.port``: a fixed port for the driver's RPC, to open in a firewall between
    the workers and this machine (Spark tries the next ports when it is taken). Unset: random."""
    spark_block_manager_port: Port | None = None
    """``spark.blockManager.port``: a fixed port for the block managers (the driver's and the
    executors'), which the workers also reach. Unset: random."""
    jars_dir: str | None = None
    """Where setup downloads the jars Spark loads (Iceberg's and the JDBC drivers). Unset:
    ``share/lakesync/jars`` in the active Python environment (``sys.prefix``)."""
    dbt_project_dir: str | None = None
    """The dbt project the pipeline runs. Unset: the one the package carries
    (``lakesync/dbt_project``)."""
    snapshot_retention: NonNegative = 7 * 86_400.0
    """Seconds an Iceberg snapshot is kept (time travel answers within it), as long as the hot
    log keeps a delta by default (``server.hot_log_retention``)."""
    snapshot_retain_last: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Snapshots of each table kept whatever their age."""
    orphan_file_age: NonNegative = 3 * 86_400.0
    """Seconds before a file no snapshot references is removed (a writer may be about to
    commit a younger one)."""


class GatewayConfig(msgspec.Struct, frozen=True):
    """One gateway (tenant): its table schemas and sync rules."""

    id: str
    schemas: list[TableSchema] = []
    rules: SyncRules | None = None


class Config(msgspec.Struct, frozen=True):
    """The whole resolved configuration."""

    data_dir: Path
    jwt_secrets: list[str]
    store_url: str = "sqlite"
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    gateways: dict[str, GatewayConfig] = {}
    source: Path | None = None
    pg_schema: str = "lakesync"
    lake: LakeConfig = LakeConfig()
    destinations: dict[str, DestinationSpec] = {}
    """``destinations:`` (:mod:`lakesync.destination_specs`): where synced tables are
    materialised."""
    connectors: dict[str, ConnectorSpec] = {}
    """``connectors:`` (:mod:`lakesync.connector_specs`): outside systems the gateway polls."""
    shards: list[ShardSpec] = []
    """``shards:`` (:mod:`lakesync.shard_specs`): further hot-log stores and their tables."""


class _GatewayFile(msgspec.Struct, forbid_unknown_fields=True):
    """``gateways: {ID: …}``: a gateway's (tenant's) table schemas and sync rules, applied when
    the gateway starts; the admin API can change both at runtime."""

    schemas: list[Any] = []
    """Table schemas (``{table, columns: [{name, type}], primaryKey?, softDelete?,
    externalIdColumn?}``); a changed file adds columns, never removes one."""
    rules: Any = None
    """Sync rules (``{version: 1, buckets: [...]}``); null = every client sees every row."""


class _File(msgspec.Struct, forbid_unknown_fields=True):
    """The file's shape (the keys it may hold, each optional)."""

    data_dir: str | None = None
    """Data directory: the embedded hot log (SQLite), the Iceberg catalog and warehouse, logs."""
    store_url: str | None = None
    """Hot-log store: ``sqlite`` (a file in the data dir) or a ``postgresql://`` DSN, which lets
    several gateway processes serve the same gateways."""
    pg_schema: str | None = None
    """Schema of the PostgreSQL hot-log store."""
    store: StoreConfig = StoreConfig()
    """Session limits of the PostgreSQL hot-log store: timeouts and TCP keepalives."""
    server: ServerConfig = ServerConfig()
    """The gateway (``lakesync up``): listening, limits, scheduled lake jobs."""
    lake: LakeConfig = LakeConfig()
    """The lake: Iceberg catalog, warehouse, Spark and dbt."""
    gateways: dict[str, Any] = {}
    """Gateways by id, each with its schemas and sync rules (parsed one gateway at a time, so
    an error names the gateway)."""
    destinations: dict[str, Any] = {}
    """Where synced tables are materialised, by destination name."""
    connectors: dict[str, Any] = {}
    """Outside systems polled into a gateway, by connector name."""
    shards: list[Any] = []
    """Further hot-log stores, each with the tables it holds (parsed one shard at a time, so
    an error names the shard)."""


_Section = TypeVar("_Section", ServerConfig, LakeConfig, StoreConfig)


def _read_file(path: Path) -> _File:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        # One line: PyYAML's own text spans several, with a context snippet.
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}") from None
    try:
        return msgspec.convert(raw or {}, _File)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {explain(exc, _File)}") from None


def _gateway(gw_id: str, raw: Any, path: Path) -> GatewayConfig:
    # Converted one gateway at a time so every error names the gateway it is in.
    try:
        validate_gateway_id(gw_id)
        spec = msgspec.convert(raw or {}, _GatewayFile)
        schemas = [parse_schema(s) for s in spec.schemas]
        rules = None if spec.rules is None else parse_rules(spec.rules)
    except msgspec.ValidationError as exc:
        message = explain(exc, _GatewayFile)
        raise ConfigError(f"{path}: gateway {gw_id!r}: {message}") from None
    except LakeSyncError as exc:
        raise ConfigError(f"{path}: gateway {gw_id!r}: {exc.message}") from None
    return GatewayConfig(gw_id, schemas, rules)


def _section_from_env(section: _Section, env: Mapping[str, str]) -> _Section:
    """``section`` with each key overridden by ``LAKESYNC_<KEY>``, converted to the key's type
    (a key that takes a list takes its items separated by commas)."""
    for field in msgspec.structs.fields(section):
        name = f"LAKESYNC_{field.name.upper()}"
        raw = env.get(name)
        if not raw:
            continue
        try:
            value = _env_value(raw, field.type)
            # replace runs the section's own checks (__post_init__), which raise ValueError.
            section = msgspec.structs.replace(section, **{field.name: value})
        except (msgspec.ValidationError, ValueError) as exc:
            raise ConfigError(f"{name}={raw!r} is invalid: {exc}") from None
    return section


def _env_value(raw: str, tp: Any) -> Any:
    """A variable's text as a value of type ``tp``: for a type that takes a list, the items
    separated by commas."""
    if _takes_list(msgspec.inspect.type_info(tp)):
        return msgspec.convert([item.strip() for item in raw.split(",")], tp, strict=False)
    return msgspec.convert(raw, tp, strict=False)


def _takes_list(info: msgspec.inspect.Type) -> bool:
    if isinstance(info, msgspec.inspect.UnionType):
        return any(_takes_list(t) for t in info.types)
    return isinstance(info, msgspec.inspect.ListType)


def apply_environment(config: Config, env: Mapping[str, str]) -> Config:
    """``config`` with the ``LAKESYNC_*`` variables set in ``env`` applied over it.

    :func:`load_config` applies the environment this way over the file; it is public so a caller
    holding a resolved :class:`Config` can apply another environment (e.g. a test's). Raises
    :class:`ConfigError` naming the variable whose value is invalid.
    """
    data_dir = env.get("LAKESYNC_DATA_DIR")
    secrets = [
        s for s in (env.get("LAKESYNC_JWT_SECRET"), env.get("LAKESYNC_JWT_SECRET_PREVIOUS")) if s
    ]
    return msgspec.structs.replace(
        config,
        data_dir=Path(data_dir) if data_dir else config.data_dir,
        jwt_secrets=secrets or config.jwt_secrets,
        store_url=env.get("LAKESYNC_STORE_URL") or config.store_url,
        pg_schema=env.get("LAKESYNC_PG_SCHEMA") or config.pg_schema,
        server=_section_from_env(config.server, env),
        store=_section_from_env(config.store, env),
        lake=_section_from_env(config.lake, env),
    )


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Resolve the configuration from ``path`` (or the default file, if any) and ``env``.

    ``env`` defaults to ``os.environ``; the file is ``path``, else ``$LAKESYNC_CONFIG`` from
    ``env``, else ``./lakesync.yaml`` when it exists, else none (embedded defaults).
    """
    env = os.environ if env is None else env
    if path is None and env.get("LAKESYNC_CONFIG"):
        path = Path(env["LAKESYNC_CONFIG"])
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = Path(DEFAULT_CONFIG_FILE)
    file = _read_file(path) if path is not None else _File()
    gateways = {
        gw_id: _gateway(gw_id, spec, path)  # type: ignore[arg-type]
        for gw_id, spec in file.gateways.items()
    }
    from_file = Config(
        data_dir=Path(file.data_dir or ".lakesync"),
        jwt_secrets=[],
        store_url=file.store_url or "sqlite",
        pg_schema=file.pg_schema or "lakesync",
        server=file.server,
        store=file.store,
        lake=file.lake,
        gateways=gateways,
        source=path,
        destinations=parse_destinations(file.destinations, str(path)),
        connectors=parse_connectors(file.connectors, str(path)),
        shards=parse_shards(file.shards, str(path)),
    )
    return apply_environment(from_file, env)


def declared_secrets(
    destinations: Iterable[DestinationSpec],
    connectors: Iterable[ConnectorSpec],
    env: Mapping[str, str],
    read_file: Callable[[str], str],
) -> list[str]:
    """What the ``${…}`` references of the declared ``destinations`` and ``connectors`` resolve
    to in ``env`` and the secrets files ``read_file`` reads: secrets a process that opens them
    knows, which every output it writes masks (:class:`lakesync.redaction.Redactor`)."""
    texts = [spec.url for spec in destinations]
    texts += [
        value
        for spec in connectors
        for value in msgspec.structs.asdict(spec).values()
        if isinstance(value, str)
    ]
    return resolved_values(texts, env, read_file)
