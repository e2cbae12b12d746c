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

``url`` may hold ``${VAR}`` / ``${file:PATH}`` references (:mod:`lakesync.secrets`); the parsed
:class:`DestinationSpec` keeps them and :func:`resolve_url` replaces them when a destination is
opened, so a parsed configuration never holds a credential. :func:`redact_url` is what messages
and logs show of a URL. Each synced table lands as a table of the same name (SPEC §11 layout).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from lakesync.delta import validate_gateway_id, validate_identifier
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.secrets import has_reference, resolve_references

__all__ = [
    "SCHEMES",
    "DeleteMode",
    "DestinationKind",
    "DestinationSpec",
    "parse_destinations",
    "redact_url",
    "resolve_url",
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

_EXAMPLES = {
    "postgres": "postgresql://user:password@host:5432/db",
    "mysql": "mysql://user:password@host:3306/db",
    "bigquery": "bigquery://project/dataset",
    "lake": "lake://namespace",
}

_PASSWORD = re.compile(r"(://[^:/@?#]*:)([^@/]*)@")


class DestinationSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One declared destination. ``url`` is as written (references unresolved)."""

    kind: DestinationKind
    url: str
    gateway: str
    tables: list[str] | None = None
    """Tables shipped; None = every table of the gateway."""
    delete: DeleteMode = "soft"
    name: str = ""
    """The key under ``destinations:`` (filled in by :func:`parse_destinations`)."""

    def ships(self, table: str) -> bool:
        """Whether ``table`` of the destination's gateway goes to this destination."""
        return self.tables is None or table in self.tables

    def __repr__(self) -> str:
        # The URL may hold a password written inline: never show it.
        return (
            f"DestinationSpec(name={self.name!r}, kind={self.kind!r}, "
            f"url={redact_url(self.url)!r}, gateway={self.gateway!r}, tables={self.tables!r}, "
            f"delete={self.delete!r})"
        )


def redact_url(url: str) -> str:
    """``url`` with any inline password replaced by ``***`` (references are kept: they name
    where the secret lives, not the secret)."""
    def mask(match: re.Match[str]) -> str:
        password = match.group(2)
        return match.group(1) + (password if has_reference(password) else "***") + "@"

    return _PASSWORD.sub(mask, url)


def _check_scheme(name: str, kind: str, url: str) -> None:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES[kind]:
        raise ConfigError(
            f"destination {name!r}: a {kind} url looks like {_EXAMPLES[kind]} "
            f"(got {redact_url(url)!r}); or write ${{VAR}} to take it from the environment"
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
            raise ConfigError(f"{where}: destination {name!r}: {exc}") from None
        except LakeSyncError as exc:
            raise ConfigError(f"{where}: {exc.message}") from None
        out[name] = msgspec.structs.replace(spec, name=name)
    return out


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
