"""Shard declarations: which tables live in which hot-log store, validated in one place, pure.

A deployment may spread its tables over several hot-log stores. ``store_url`` stays the default
store, holding every table no shard lists; each entry of ``shards:`` names a further store and
the tables it holds::

    store_url: postgresql://lakesync@db-main/lakesync
    shards:
      - name: events
        store_url: postgresql://lakesync@db-events/lakesync
        tables: [events, logs]

The declaration applies to every gateway of the deployment (a table name means that table in
each gateway). :func:`parse_shards` refuses a shard without tables, a name used twice and a
table listed twice, each error naming the shard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import msgspec

from lakesync.delta import validate_identifier
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.hints import explain

__all__ = ["DEFAULT_SHARD", "ShardSpec", "parse_shards"]

DEFAULT_SHARD = "default"
"""The name the default store (``store_url``) goes by in errors, status and metrics."""

_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"


class ShardSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One shard: a label, the store holding its tables, and those tables."""

    name: Annotated[str, msgspec.Meta(pattern=_NAME)]
    """A label for status, metrics and errors (letters, digits, ``_``, ``-``)."""
    store_url: str
    """Its hot-log store, in the form of the top-level ``store_url``."""
    tables: list[str]
    """The tables it holds (in every gateway); at least one."""


def parse_shards(raw: Sequence[Any], where: str) -> list[ShardSpec]:
    """The ``shards:`` section of ``lakesync.yaml``; ``where`` (the file) prefixes every
    :class:`ConfigError`, which names the shard at fault."""
    shards: list[ShardSpec] = []
    owner: dict[str, str] = {}
    for index, body in enumerate(raw):
        label = _label(body, index)
        try:
            shard = msgspec.convert(body, ShardSpec)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where}: shard {label}: {explain(exc, ShardSpec)}") from None
        problem = _problem(shard, shards, owner)
        if problem:
            raise ConfigError(f"{where}: shard {shard.name!r}: {problem}")
        owner.update(dict.fromkeys(shard.tables, shard.name))
        shards.append(shard)
    return shards


def _label(body: object, index: int) -> str:
    name = body.get("name") if isinstance(body, Mapping) else None
    return repr(name) if isinstance(name, str) else f"#{index + 1}"


def _problem(shard: ShardSpec, earlier: Sequence[ShardSpec], owner: Mapping[str, str]) -> str:
    if shard.name == DEFAULT_SHARD or any(s.name == shard.name for s in earlier):
        return "the name is already taken (each shard needs its own; 'default' is the store_url's)"
    if not shard.tables:
        return "lists no tables (a shard holds at least one)"
    for table in shard.tables:
        try:
            validate_identifier(table, "table")
        except LakeSyncError as exc:
            return exc.message
    seen: set[str] = set()
    for table in shard.tables:
        if table in seen:
            return f"lists table {table!r} twice"
        if table in owner:
            return f"table {table!r} is already in shard {owner[table]!r}"
        seen.add(table)
    return ""

