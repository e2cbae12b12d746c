"""Connectors: outside systems (Jira, Salesforce, PostgreSQL, MySQL/MariaDB) polled into a
gateway through its normal push path.

:class:`~connectors.base.Source` implementations read a system; :class:`~connectors.poller.Poller`
runs one into a :class:`~connectors.base.Sink` (the gateway); :func:`open_source` builds the
source a :data:`lakesync.connectors.ConnectorSpec` declares and :func:`open_actions` its
:class:`~connectors.actions.ActionHandler` (Jira and Salesforce).
"""

from __future__ import annotations

from connectors._factory import open_actions, open_source
from connectors._paging import PagingError
from connectors.actions import ActionDescriptor, ActionError, ActionHandler
from connectors.base import Chunk, Sink, Source
from connectors.poller import ConnectorStatus, Poller

__all__ = [
    "ActionDescriptor",
    "ActionError",
    "ActionHandler",
    "Chunk",
    "ConnectorStatus",
    "PagingError",
    "Poller",
    "Sink",
    "Source",
    "open_actions",
    "open_source",
]
