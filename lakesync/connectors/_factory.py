"""Build the :class:`~lakesync.connectors.base.Source` a spec declares; a missing optional
dependency is
a :class:`~lakesync.errors.ConfigError` naming the ``pip install`` extra."""

from __future__ import annotations

from lakesync.connector_specs import (
    BigQuerySpec,
    CloudWatchLogsSpec,
    ConnectorSpec,
    JiraSpec,
    MysqlSpec,
    PostgresCdcSpec,
    PostgresSpec,
    SalesforceSpec,
)
from lakesync.connectors.actions import ActionHandler
from lakesync.connectors.base import Source
from lakesync.connectors.bigquery import BigQuerySource
from lakesync.connectors.cloudwatch_logs import CloudWatchLogsSource
from lakesync.connectors.database import DatabaseSource, MysqlDialect, PostgresDialect
from lakesync.connectors.jira import JiraActions, JiraSource
from lakesync.connectors.pg_cdc import PostgresCdcSource
from lakesync.connectors.salesforce import SalesforceActions, SalesforceSource
from lakesync.errors import ConfigError

__all__ = ["open_actions", "open_source"]


def open_source(spec: ConnectorSpec) -> Source:
    """The source for ``spec`` (secrets already resolved)."""
    try:
        match spec:
            case JiraSpec():
                return JiraSource(spec)
            case SalesforceSpec():
                return SalesforceSource(spec)
            case PostgresSpec():
                return DatabaseSource(spec, PostgresDialect())
            case MysqlSpec():
                return DatabaseSource(spec, MysqlDialect())
            case PostgresCdcSpec():
                return PostgresCdcSource(spec)
            case BigQuerySpec():
                return BigQuerySource(spec)
            case CloudWatchLogsSpec():
                return CloudWatchLogsSource(spec)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"connector kind needs {exc.name}: pip install 'lakesync[connectors]'"
        ) from None
    raise ConfigError(f"no source for connector kind {type(spec).__name__}")


def open_actions(spec: ConnectorSpec) -> ActionHandler | None:
    """The action handler of ``spec``'s kind (secrets resolved) with the spec's grants, None
    for kinds without actions (the databases)."""
    handler: ActionHandler
    match spec:
        case JiraSpec():
            handler = JiraActions(spec)
        case SalesforceSpec():
            handler = SalesforceActions(spec)
        case _:
            return None
    handler.grants = tuple(spec.actions)
    return handler
