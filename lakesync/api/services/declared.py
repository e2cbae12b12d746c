"""Apply the gateways declared in ``lakesync.yaml`` at start-up without undoing admin changes.

The config file and the admin API both change a gateway's schemas and sync rules. The store
keeps, next to each, the declaration last applied from the file (documents of kind
``declared-schema`` and ``declared-rules``), so a restart can tell an edited file from an
unchanged one:

- **Schemas** merge additively (:func:`lakesync.schema.merge_declared`): columns added through
  the admin API stay, new declared columns are added, and a conflicting declaration (another
  type for a stored column) is a warning, never a failed start.
- **Rules**: what the store holds wins (it may have been set through the admin API) unless the
  file's rules changed since they were last applied; then the file's replace them, with a warning
  naming both versions when they replace rules set through the admin API.

Then every gateway with schemas is checked: its rules in force must name only registered tables
and their columns (:func:`lakesync.rules.check_rules`). A mistake there refuses the start with a
:class:`~lakesync.errors.ConfigError` naming the gateway, the bucket, the table and the column,
rather than a gateway that reports ready and hides rows from every client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from lakesync.config import GatewayConfig
from lakesync.connector_specs import ConnectorSpec, tables_by_gateway
from lakesync.errors import ConfigError, SchemaError
from lakesync.hotlog.ports import DocumentStore, RulesStore
from lakesync.rules import SyncRules, check_rules, rules_to_wire
from lakesync.schema import TableSchema, merge_declared, parse_schema, schema_to_wire

__all__ = ["DeclaredStore", "apply_declared", "check_gateways"]

_log = logging.getLogger(__name__)

SCHEMA_KIND = "declared-schema"
RULES_KIND = "declared-rules"


class DeclaredStore(DocumentStore, RulesStore, Protocol):
    """What applying the declared config takes: the gateways' schemas (documents) and rules."""


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def apply_declared(
    store: DeclaredStore,
    gateways: Mapping[str, GatewayConfig],
    connectors: Mapping[str, ConnectorSpec] | None = None,
) -> None:
    """Bring the store in line with the declared ``gateways`` (see the module docstring), then
    :func:`check_gateways` (the tables the declared ``connectors`` fill count as known). Runs
    store calls: call it from a worker thread in async code."""
    for gw, gateway in gateways.items():
        applied = store.list_docs(gw, SCHEMA_KIND)
        for schema in gateway.schemas:
            _apply_schema(store, gw, schema, applied.get(schema.table))
        if gateway.rules is not None:
            _apply_rules(store, gw, gateway.rules)
    check_gateways(store, connectors or {})


def check_gateways(store: DeclaredStore, connectors: Mapping[str, ConnectorSpec]) -> None:
    """Raise :class:`ConfigError` when the rules of a gateway with schemas name a table or
    column no schema of it has (naming the gateway, the bucket, the table and the column); a
    table one of its ``connectors`` fills is known before its schema registers."""
    pending = tables_by_gateway(connectors)
    schemas: dict[str, dict[str, TableSchema]] = {}
    for gw, name, body in store.docs_of_kind("schema"):
        schemas.setdefault(gw, {})[name] = parse_schema(body, stored=True)
    for gw, tables in schemas.items():
        try:
            check_rules(store.get_rules(gw).rules, tables, pending.get(gw, set()))
        except SchemaError as exc:
            raise ConfigError(
                f"gateway {gw!r}: {exc.message}; fix gateways.{gw}.rules in lakesync.yaml "
                f"(changed rules there replace the stored ones) or declare the missing schema "
                f"under gateways.{gw}.schemas"
            ) from None


def _apply_schema(
    store: DocumentStore, gw: str, declared: TableSchema, applied: dict[str, Any] | None
) -> None:
    wire = schema_to_wire(declared)
    if applied == wire:
        return  # the file did not change: the stored schema (admin additions included) stands
    conflicts: list[str] = []

    def change(stored: dict[str, Any] | None) -> dict[str, Any]:
        if stored is None:
            return wire
        last = None if applied is None else parse_schema(applied, stored=True)
        merged, found = merge_declared(parse_schema(stored, stored=True), declared, last)
        conflicts[:] = found
        return schema_to_wire(merged)

    store.update_doc(gw, "schema", declared.table, change)
    store.put_doc(gw, SCHEMA_KIND, declared.table, wire)
    for message in conflicts:
        _log.warning("gateway %r: lakesync.yaml vs the stored schema: %s", gw, message)


def _apply_rules(store: DeclaredStore, gw: str, declared: SyncRules) -> None:
    wire = rules_to_wire(declared)
    applied = store.list_docs(gw, RULES_KIND).get("rules")
    current = store.get_rules(gw)
    stored = None if current.rules is None else rules_to_wire(current.rules)
    if applied is not None and applied["rules"] == wire:
        if current.stamp and stored != wire:
            _log.info(
                "gateway %r: keeping the sync rules set through the admin API; lakesync.yaml's "
                "are unchanged since they were applied",
                gw,
            )
        return
    if current.stamp and stored != wire and (applied is None or stored != applied["rules"]):
        _log.warning(
            "gateway %r: lakesync.yaml's sync rules changed since they were last applied and "
            "replace the rules set through the admin API: stored %s, now %s",
            gw,
            _json(stored),
            _json(wire),
        )
    store.set_rules(gw, declared)
    store.put_doc(gw, RULES_KIND, "rules", {"rules": wire})
