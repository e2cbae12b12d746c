"""The gateway's settings: one typed object built from the resolved ``lakesync.config.Config``.

``lakesync.config`` reads and validates ``lakesync.yaml`` and the environment (data dir, JWT
secrets, store url and ``pg_schema``, the ``server:`` knobs such as ``rate_limit`` /
``LAKESYNC_RATE_LIMIT``, the gateways); nothing here reads a file or a variable. The request
limits below (body size, deltas and pull page sizes) are fixed defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lakesync.config import (
    MIB,
    Config,
    GatewayConfig,
    ServerConfig,
    StoreConfig,
    apply_environment,
    declared_secrets,
)
from lakesync.connector_specs import ConnectorSpec
from lakesync.destination_specs import DestinationSpec
from lakesync.shard_specs import ShardSpec

__all__ = ["GatewaySettings"]

_SERVER = ServerConfig()


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything the gateway app needs to run."""

    data_dir: Path
    jwt_secrets: tuple[str, ...]
    store_url: str = "sqlite"
    pg_schema: str = "lakesync"
    store: StoreConfig = field(default_factory=StoreConfig)
    """Session limits of a PostgreSQL hot-log store (``store:``)."""
    shards: tuple[ShardSpec, ...] = ()
    """Further hot-log stores and the tables each holds (``shards:``), served with the
    default store as one (:mod:`lakesync.hotlog.sharded`)."""
    gateways: Mapping[str, GatewayConfig] = field(default_factory=dict)
    connectors: Mapping[str, ConnectorSpec] = field(default_factory=dict)
    """Declared connectors by name (``${VAR}`` references unresolved)."""
    destinations: Mapping[str, DestinationSpec] = field(default_factory=dict)
    """Declared destinations by name: the sources ``pull?source=NAME`` reads."""
    max_body_bytes: int = MIB
    max_deltas: int = 10_000
    pull_default_limit: int = 100
    pull_max_limit: int = 10_000
    rate_limit: float = _SERVER.rate_limit
    rate_burst: float = _SERVER.rate_burst
    backpressure_bytes: int = _SERVER.backpressure_bytes
    ws_max_connections: int = _SERVER.ws_max_connections
    ws_max_connections_per_gateway: int = _SERVER.ws_max_connections_per_gateway
    ws_max_connections_per_client: int = _SERVER.ws_max_connections_per_client
    ws_send_queue_bytes: int = _SERVER.ws_send_queue_bytes
    ws_rate_limit: float = _SERVER.ws_rate_limit
    flush_interval: float = _SERVER.flush_interval
    pipeline_interval: float = _SERVER.pipeline_interval
    compaction_interval: float = _SERVER.compaction_interval
    docs: bool = _SERVER.docs
    metrics_gateway_labels: bool = _SERVER.metrics_gateway_labels
    cors_origins: tuple[str, ...] = ("*",)
    """Origins whose pages may use the sync API (``server.cors_origins``; ``*`` for any)."""
    console_sample_s: float = 5.0
    """How often the web console's history (the last hour, in memory) samples the status."""

    def known_secrets(
        self, env: Mapping[str, str], read_file: Callable[[str], str]
    ) -> list[str]:
        """The secrets this gateway knows, for redaction: its JWT secrets and what the
        ``${…}`` references of its declared destinations and connectors resolve to in ``env``
        and the secrets files ``read_file`` reads."""
        found = declared_secrets(
            self.destinations.values(), self.connectors.values(), env, read_file
        )
        return [*self.jwt_secrets, *found]

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> GatewaySettings:
        """The gateway's settings from the resolved ``config`` (``lakesync.config.load_config``).

        ``env``, when given, is applied over ``config`` as ``load_config`` applies the process
        environment (:func:`lakesync.config.apply_environment`); invalid values raise
        :class:`~lakesync.errors.ConfigError` naming the variable.
        """
        if env is not None:
            config = apply_environment(config, env)
        server = config.server
        return cls(
            data_dir=config.data_dir,
            jwt_secrets=tuple(config.jwt_secrets),
            store_url=config.store_url,
            pg_schema=config.pg_schema,
            store=config.store,
            shards=tuple(config.shards),
            gateways=dict(config.gateways),
            connectors=dict(config.connectors),
            destinations=dict(config.destinations),
            rate_limit=server.rate_limit,
            rate_burst=server.rate_burst,
            backpressure_bytes=server.backpressure_bytes,
            ws_max_connections=server.ws_max_connections,
            ws_max_connections_per_gateway=server.ws_max_connections_per_gateway,
            ws_max_connections_per_client=server.ws_max_connections_per_client,
            ws_send_queue_bytes=server.ws_send_queue_bytes,
            ws_rate_limit=server.ws_rate_limit,
            flush_interval=server.flush_interval,
            pipeline_interval=server.pipeline_interval,
            compaction_interval=server.compaction_interval,
            docs=server.docs,
            metrics_gateway_labels=server.metrics_gateway_labels,
            cors_origins=(
                (server.cors_origins,)
                if isinstance(server.cors_origins, str)
                else tuple(server.cors_origins)
            ),
        )
