"""The gateway's settings: one typed object built from ``lakesync.config`` and the environment.

``lakesync.config.load_config`` reads the file and the shared variables (data dir, JWT secrets,
store url, gateways). The gateway-only knobs below are read here, in one place, until they move
into ``Config``:

- ``LAKESYNC_PG_SCHEMA`` (default ``lakesync``): schema of the PostgreSQL hot log
- ``LAKESYNC_RATE_LIMIT`` (pushes+pulls per second per client, 0 = off) and ``LAKESYNC_RATE_BURST``
- ``LAKESYNC_BACKPRESSURE_BYTES`` (un-flushed hot-log size that turns pushes away with 503,
  0 = off; default 1 GiB)
- ``LAKESYNC_FLUSH_INTERVAL`` (seconds between landing flushes by ``lakesync up``, default 5,
  0 = only on ``POST /v1/admin/flush/{gw}``) and ``LAKESYNC_PIPELINE_INTERVAL`` (seconds between
  scheduled ``lakesync pipeline run`` subprocesses, default 0 = off)
- ``LAKESYNC_WS_MAX_CONNECTIONS`` (default 10000) and ``LAKESYNC_WS_RATE_LIMIT`` (frames per
  second per connection, default 100, burst twice that and at least 5)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lakesync.config import Config, GatewayConfig
from lakesync.errors import ConfigError

__all__ = ["GatewaySettings"]

MIB = 1024 * 1024


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"{name} must not be negative, got {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything the gateway app needs to run."""

    data_dir: Path
    jwt_secrets: tuple[str, ...]
    store_url: str = "sqlite"
    pg_schema: str = "lakesync"
    gateways: Mapping[str, GatewayConfig] = field(default_factory=dict)
    max_body_bytes: int = MIB
    max_deltas: int = 10_000
    pull_default_limit: int = 100
    pull_max_limit: int = 10_000
    rate_limit: float = 0.0
    rate_burst: float = 20.0
    backpressure_bytes: int = 1024 * MIB
    ws_max_connections: int = 10_000
    ws_rate_limit: float = 100.0
    flush_interval: float = 5.0
    pipeline_interval: float = 0.0

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> GatewaySettings:
        """Combine the shared configuration with the gateway's own environment variables."""
        env = os.environ if env is None else env
        return cls(
            data_dir=config.data_dir,
            jwt_secrets=tuple(config.jwt_secrets),
            store_url=config.store_url,
            pg_schema=env.get("LAKESYNC_PG_SCHEMA") or "lakesync",
            gateways=dict(config.gateways),
            rate_limit=_number(env, "LAKESYNC_RATE_LIMIT", 0.0),
            rate_burst=_number(env, "LAKESYNC_RATE_BURST", 20.0),
            backpressure_bytes=int(_number(env, "LAKESYNC_BACKPRESSURE_BYTES", 1024 * MIB)),
            ws_max_connections=int(_number(env, "LAKESYNC_WS_MAX_CONNECTIONS", 10_000)),
            ws_rate_limit=_number(env, "LAKESYNC_WS_RATE_LIMIT", 100.0),
            flush_interval=_number(env, "LAKESYNC_FLUSH_INTERVAL", 5.0),
            pipeline_interval=_number(env, "LAKESYNC_PIPELINE_INTERVAL", 0.0),
        )
