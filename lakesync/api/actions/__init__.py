"""Actions (docs/protocol.md §5 ``/action`` and ``/actions``): the dispatcher that runs clients'
actions on the connectors' handlers, at most once per idempotency key."""

from __future__ import annotations

from lakesync.api.actions.dispatcher import (
    ACTION_KIND,
    Action,
    ActionDispatcher,
    ActionResult,
)

__all__ = ["ACTION_KIND", "Action", "ActionDispatcher", "ActionResult"]
