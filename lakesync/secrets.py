"""Secret references in configuration values: ``${VAR}`` and ``${file:PATH}``.

A configuration value (a destination's ``url``, a connector's token) may hold references instead
of the credential itself: ``${VAR}`` is taken from the environment, ``${file:PATH}`` is the
stripped contents of a secrets file. Declarations keep the reference; the edge that connects
resolves it, so a parsed configuration never holds the secret and error messages name where the
secret lives, never its value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from lakesync.errors import ConfigError

__all__ = ["REFERENCE", "has_reference", "resolve_key", "resolve_references", "resolved_values"]

REFERENCE = re.compile(r"\$\{(file:)?([^}]+)\}")


def has_reference(text: str) -> bool:
    """Whether ``text`` holds at least one ``${…}`` reference."""
    return REFERENCE.search(text) is not None


def resolve_references(
    text: str, env: Mapping[str, str], read_file: Callable[[str], str]
) -> str:
    """``text`` with every ``${VAR}`` / ``${file:PATH}`` replaced by its value.

    Raises :class:`ConfigError` naming the variable or the file (never a value) when a variable
    is unset or empty, or a file cannot be read.
    """

    def one(match: re.Match[str]) -> str:
        ref = match.group(2)
        if match.group(1):
            try:
                return read_file(ref).strip()
            except OSError as exc:
                raise ConfigError(f"cannot read secrets file {ref}: {exc.strerror}") from None
        if not env.get(ref):
            raise ConfigError(f"environment variable {ref} is not set")
        return env[ref]

    return REFERENCE.sub(one, text)


def resolve_key(
    key: str, value: str | None, env: Mapping[str, str], read_file: Callable[[str], str]
) -> str | None:
    """The configuration key ``key``'s ``value`` with its references resolved (None when unset
    or empty); a :class:`ConfigError` names ``key`` and the variable or file, never a value."""
    if not value:
        return None
    try:
        return resolve_references(value, env, read_file)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc.message}") from None


def resolved_values(
    texts: Iterable[str], env: Mapping[str, str], read_file: Callable[[str], str]
) -> list[str]:
    """What every ``${VAR}`` / ``${file:PATH}`` reference in ``texts`` resolves to, for
    redaction (:class:`lakesync.redaction.Redactor`): the secrets a process that resolves them
    knows. A reference that does not resolve (unset, unreadable) is skipped: it has no value
    to hide."""
    out: list[str] = []
    for text in texts:
        for match in REFERENCE.finditer(text):
            try:
                out.append(resolve_references(match.group(0), env, read_file))
            except ConfigError:
                continue
    return out
