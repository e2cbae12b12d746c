"""Destination declarations: where a gateway's synced tables are materialised, validated here.

The ``destinations:`` section of ``lakesync.yaml`` has a fixed shape::

    destinations:
      NAME:
        kind: postgres            # postgres | mysql | bigquery | lake
        url: postgresql://…       # a DSN, or ${ENV_VAR}; mysql://user:pw@host:port/db;
                                  # bigquery://project/dataset; lake://namespace
        gateway: gw1
        tables: [todos]           # optional: default every table of that gateway
        delete: soft              # soft (deleted_at set) | hard (row removed)

Optional keys (added to that shape, never changing it):

- ``routes: {TABLE: OTHER}`` (composite): ship ``TABLE`` to the declared destination ``OTHER``
  instead of this one; the routed tables are shipped by this destination (``tables`` need not
  list them).
- ``secondaries: [OTHER, …]`` (fan-out): every table shipped here is then shipped, best
  effort, into each ``OTHER`` from that secondary's own watermark (so a missed run is caught
  up); a secondary's failure is logged and counted, never raised.
- ``hot_window: 30d`` (lifecycle tiering): rows whose last change (the greatest cell or
  tombstone clock of their merged state in the lake, not when this destination received them)
  is older than the window leave it; the lake's ``analytics.<table>`` (the cold tier) keeps
  them. Units ``s``, ``m``, ``h``, ``d``, ``w``; not on ``kind: lake`` nor on a secondary (a
  whole copy).

A destination named under another's ``routes`` or ``secondaries`` is shipped through it only.

``url`` may hold ``${VAR}`` / ``${file:PATH}`` references (:mod:`lakesync.secrets`); the parsed
:class:`DestinationSpec` keeps them and :func:`resolve_url` replaces them when a destination is
opened, so a parsed configuration never holds a credential. :func:`lakesync.redaction.redact` is
what messages and logs show of a URL. Each synced table lands as a table of the same name
(docs/protocol.md §11 layout).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from lakesync.delta import validate_gateway_id, validate_identifier
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.hints import explain, of_gateway
from lakesync.redaction import redact
from lakesync.secrets import has_reference, resolve_references

__all__ = [
    "COLD_TIER",
    "SCHEMES",
    "DeleteMode",
    "DestinationKind",
    "DestinationSpec",
    "parse_destinations",
    "parse_window",
    "receivers",
    "resolve_url",
    "shipped_on_their_own",
]

DestinationKind = Literal["postgres", "mysql", "bigquery", "lake"]
DeleteMode = Literal["soft", "hard"]

SCHEMES: dict[str, tuple[str, ...]] = {
    "postgres": ("postgresql", "postgres"),
    "mysql": ("mysql", "mariadb"),
    "bigquery": ("bigquery",),
    "lake": ("lake",),
}
"""URL schemes each kind accepts."""

COLD_TIER: dict[str, bool] = {
    "postgres": False, "mysql": False, "bigquery": False, "lake": True,
}
"""Whether each kind is the lake's cold tier itself, so it takes no ``hot_window``: the spec's
view of the capability the registry's adapters declare
(:attr:`lakesync.destinations.base.Destination.lives_in_lake`, checked equal by the tests)."""

_EXAMPLES = {
    "postgres": "postgresql://user:password@host:5432/db",
    "mysql": "mysql://user:password@host:3306/db",
    "bigquery": "bigquery://project/dataset",
    "lake": "lake://namespace",
}

class DestinationSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One declared destination. ``url`` is as written (references unresolved)."""

    kind: DestinationKind
    """The kind of database."""
    url: str
    """Where it is: ``postgresql://user:pw@host:5432/db``, ``mysql://user:pw@host:3306/db``,
    ``bigquery://project/dataset`` or ``lake://namespace``; may hold ``${VAR}`` /
    ``${file:PATH}`` references."""
    gateway: str
    """The gateway whose tables are shipped."""
    tables: list[str] | None = None
    """Tables shipped; unset = every table of the gateway."""
    delete: DeleteMode = "soft"
    """A deleted row: ``soft`` sets its ``deleted_at``, ``hard`` removes it."""
    name: str = ""
    """The key under ``destinations:`` (filled in by :func:`parse_destinations`)."""
    routes: dict[str, str] = {}
    """Composite: table -> the declared destination that table goes to instead."""
    secondaries: list[str] = []
    """Fan-out: declared destinations that get a best-effort copy of every change set."""
    hot_window: str | None = None
    """Lifecycle tiering: rows unchanged for longer leave this destination (e.g. ``30d``)."""

    def ships(self, table: str) -> bool:
        """Whether ``table`` of the destination's gateway goes to (or through) this
        destination."""
        return self.tables is None or table in self.tables or table in self.routes

    @property
    def hot_window_seconds(self) -> float | None:
        """``hot_window`` in seconds (None: rows stay)."""
        return None if self.hot_window is None else parse_window(self.hot_window)

    def __repr__(self) -> str:
        # The URL may hold a password written inline: never show it.
        return (
            f"DestinationSpec(name={self.name!r}, kind={self.kind!r}, "
            f"url={redact(self.url)!r}, gateway={self.gateway!r}, tables={self.tables!r}, "
            f"delete={self.delete!r}, routes={self.routes!r}, "
            f"secondaries={self.secondaries!r}, hot_window={self.hot_window!r})"
        )


_WINDOW = re.compile(r"([1-9][0-9]{0,8})([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_window(text: str) -> float:
    """Seconds of a window written as a positive whole number and a unit: ``90s``, ``15m``,
    ``12h``, ``30d``, ``4w``. Raises :class:`ConfigError` saying so otherwise."""
    match = _WINDOW.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"hot_window {text!r} is not a window: write a whole number and a unit "
            "(s, m, h, d, w), e.g. 30d"
        )
    return float(int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _check_scheme(name: str, kind: str, url: str) -> None:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES[kind]:
        raise ConfigError(
            f"destination {name!r}: a {kind} url looks like {_EXAMPLES[kind]} "
            f"(got {redact(url)!r}); or write ${{VAR}} to take it from the environment"
        )


def parse_destinations(raw: Mapping[str, Any], where: str) -> dict[str, DestinationSpec]:
    """Validate the ``destinations:`` section; ``where`` (the file) prefixes every error.

    Checks every key and type, names (identifiers: they name watermarks and staging tables),
    the gateway id, the table names and, when the URL holds no reference, its scheme.
    """
    out: dict[str, DestinationSpec] = {}
    for name, body in raw.items():
        try:
            validate_identifier(name, "destination name")
            spec = msgspec.convert(body, DestinationSpec)
            validate_gateway_id(spec.gateway)
            for table in spec.tables or []:
                validate_identifier(table, f"table name in destination {name!r}")
            if spec.tables is not None and len(set(spec.tables)) != len(spec.tables):
                raise ConfigError(f"destination {name!r} lists a table twice")
            if not has_reference(spec.url):
                _check_scheme(name, spec.kind, spec.url)
        except msgspec.ValidationError as exc:
            raise ConfigError(
                f"{where}: {of_gateway(body)}destination {name!r}: {explain(exc, DestinationSpec)}"
            ) from None
        except LakeSyncError as exc:
            raise ConfigError(f"{where}: {of_gateway(body)}{exc.message}") from None
        out[name] = msgspec.structs.replace(spec, name=name)
    for spec in out.values():
        try:
            _check_references(spec, out)
        except LakeSyncError as exc:
            raise ConfigError(f"{where}: {exc.message}") from None
    return out


def _check_references(spec: DestinationSpec, specs: Mapping[str, DestinationSpec]) -> None:
    """Routes and secondaries name other declared destinations of the same gateway, which
    themselves route nowhere (one level: no cycles, no chains); the lake has no hot window."""
    if spec.hot_window is not None:
        if COLD_TIER[spec.kind]:
            hot = [kind for kind, cold in COLD_TIER.items() if not cold]
            raise ConfigError(
                f"destination {spec.name!r}: a {spec.kind} destination is the cold tier itself; "
                f"hot_window goes on a {', '.join(hot[:-1])} or {hot[-1]} destination"
            )
        parse_window(spec.hot_window)
    for table in spec.routes:
        validate_identifier(table, f"table name in routes of destination {spec.name!r}")
    for key, target in [*(("routes", t) for t in spec.routes.values()),
                        *(("secondaries", t) for t in spec.secondaries)]:
        other = specs.get(target)
        if other is None:
            known = ", ".join(sorted(specs))
            raise ConfigError(
                f"destination {spec.name!r}: {key} names {target!r}, which is not declared "
                f"(declared: {known})"
            )
        if target == spec.name:
            raise ConfigError(f"destination {spec.name!r}: {key} names the destination itself")
        if other.gateway != spec.gateway:
            raise ConfigError(
                f"destination {spec.name!r}: {key} names {target!r} of gateway "
                f"{other.gateway!r}; both must serve gateway {spec.gateway!r}"
            )
        if key == "secondaries" and other.hot_window is not None:
            raise ConfigError(
                f"destination {spec.name!r}: secondary {target!r} has a hot_window; a "
                "secondary is a whole copy (put hot_window on the primary)"
            )
        if other.routes or other.secondaries:
            raise ConfigError(
                f"destination {spec.name!r}: {key} names {target!r}, which has routes or "
                "secondaries of its own (one level only)"
            )
    if len(set(spec.secondaries)) != len(spec.secondaries):
        raise ConfigError(f"destination {spec.name!r} lists a secondary twice")


def shipped_on_their_own(specs: Mapping[str, DestinationSpec]) -> list[DestinationSpec]:
    """The destinations shipping starts from: every one not named under another's ``routes``
    or ``secondaries`` (those are written through the one naming them)."""
    used = {t for s in specs.values() for t in [*s.routes.values(), *s.secondaries]}
    return [s for s in specs.values() if s.name not in used]


def receivers(spec: DestinationSpec, table: str) -> list[str]:
    """The destinations ``table`` lands in when ``spec`` (a destination shipped on its own)
    ships it: its route's target, else ``spec`` itself, then each fan-out secondary."""
    return [spec.routes.get(table, spec.name), *spec.secondaries]


def resolve_url(
    spec: DestinationSpec, env: Mapping[str, str], read_file: Callable[[str], str]
) -> str:
    """The destination's URL with its references resolved and its scheme checked.

    Raises :class:`ConfigError` naming the destination and the variable or file (never a value).
    """
    try:
        url = resolve_references(spec.url, env, read_file)
    except ConfigError as exc:
        raise ConfigError(f"destination {spec.name!r}: {exc.message}") from None
    _check_scheme(spec.name, spec.kind, url)
    return url
