"""Connectors: outside systems (Jira, Salesforce, PostgreSQL, MySQL/MariaDB) polled into a
gateway through its normal push path.

:class:`~lakesync.connectors.base.Source` implementations read a system;
:class:`~lakesync.connectors.poller.Poller`
runs one into a :class:`~lakesync.connectors.base.Sink` (the gateway); :func:`open_source` builds
the
source a :data:`lakesync.connector_specs.ConnectorSpec` declares and :func:`open_actions` its
:class:`~lakesync.connectors.actions.ActionHandler` (Jira and Salesforce).
"""

from __future__ import annotations

from lakesync.connectors._factory import open_actions, open_source
from lakesync.connectors.actions import ActionDescriptor, ActionError, ActionHandler
from lakesync.connectors.base import Chunk, Sink, Source
from lakesync.connectors.poller import ConnectorStatus, Poller

__all__ = [
    "ActionDescriptor",
    "ActionError",
    "ActionHandler",
    "Chunk",
    "ConnectorStatus",
    "Poller",
    "Sink",
    "Source",
    "open_actions",
    "open_source",
]
