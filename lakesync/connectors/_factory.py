"""Build the :class:`~lakesync.connectors.base.Source` a spec declares; a missing optional
dependency is
a :class:`~lakesync.errors.ConfigError` naming the ``pip install`` extra."""

from __future__ import annotations

from lakesync.connector_specs import (
    ConnectorSpec,
    JiraSpec,
    MysqlSpec,
    PostgresCdcSpec,
    PostgresSpec,
    SalesforceSpec,
)
from lakesync.connectors.actions import ActionHandler
from lakesync.connectors.base import Source
from lakesync.errors import ConfigError

__all__ = ["open_actions", "open_source"]


def open_source(spec: ConnectorSpec) -> Source:
    """The source for ``spec`` (secrets already resolved)."""
    try:
        match spec:
            case JiraSpec():
                from lakesync.connectors.jira import JiraSource

                return JiraSource(spec)
            case SalesforceSpec():
                from lakesync.connectors.salesforce import SalesforceSource

                return SalesforceSource(spec)
            case PostgresSpec():
                from lakesync.connectors.database import DatabaseSource, PostgresDialect

                return DatabaseSource(spec, PostgresDialect())
            case MysqlSpec():
                from lakesync.connectors.database import DatabaseSource, MysqlDialect

                return DatabaseSource(spec, MysqlDialect())
            case PostgresCdcSpec():
                from lakesync.connectors.pg_cdc import PostgresCdcSource

                return PostgresCdcSource(spec)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"connector kind needs {exc.name}: pip install 'lakesync[connectors]'"
        ) from None
    raise ConfigError(f"no source for connector kind {type(spec).__name__}")


def open_actions(spec: ConnectorSpec) -> ActionHandler | None:
    """The action handler of ``spec``'s kind (secrets resolved), None for kinds without
    actions (the databases)."""
    match spec:
        case JiraSpec():
            from lakesync.connectors.jira import JiraActions

            return JiraActions(spec)
        case SalesforceSpec():
            from lakesync.connectors.salesforce import SalesforceActions

            return SalesforceActions(spec)
        case _:
            return None
