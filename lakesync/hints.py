"""The nearest known name for a mistyped one ("did you mean …?"), for every error naming one.

Used where a name is checked against the names that exist: configuration keys (an unknown key
of ``lakesync.yaml``, a rules document or a table schema, from msgspec's ``forbid_unknown_fields``
errors) and the tables and columns sync rules name (:func:`lakesync.rules.check_rules`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

import msgspec
import msgspec.inspect as mi

__all__ = ["explain", "nearest", "of_gateway", "suggestion"]

_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]*)`(?: - at `\$([^`]*)`)?")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (difflib, case-blind), or None when none is close."""
    by_fold = {k.lower(): k for k in known}
    found = difflib.get_close_matches(name.lower(), list(by_fold), n=1, cutoff=0.6)
    return by_fold[found[0]] if found else None


def suggestion(name: str, known: Iterable[str], kind: str = "names") -> str:
    """``"; did you mean 'x'?"`` for the nearest known name, else the known names (at most ten)
    so the reader sees what exists: a suffix for an error message about ``name``."""
    names = sorted(set(known))
    close = nearest(name, names)
    if close is not None:
        return f"; did you mean {close!r}?"
    if not names:
        return f"; there are no {kind}"
    shown = ", ".join(names[:10]) + (", …" if len(names) > 10 else "")
    return f"; known {kind}: {shown}"


def of_gateway(declaration: object) -> str:
    """``"gateway 'gw1': "`` for a connector or destination declaration naming its gateway
    (else ``""``): the prefix that makes an error in it say which gateway it belongs to."""
    gateway = declaration.get("gateway") if isinstance(declaration, Mapping) else None
    return f"gateway {gateway!r}: " if isinstance(gateway, str) else ""


def _fields_at(info: mi.Type, steps: list[str]) -> set[str]:
    """The keys the struct(s) at ``steps`` (msgspec path steps) accept."""
    while isinstance(info, mi.Metadata):
        info = info.type
    if isinstance(info, mi.UnionType):
        return set().union(*(_fields_at(t, steps) for t in info.types))
    if not steps:
        if isinstance(info, mi.StructType):
            return {f.encode_name for f in info.fields} | (
                {info.tag_field} if info.tag_field else set()
            )
        return set()
    step, rest = steps[0], steps[1:]
    if isinstance(info, mi.StructType) and not step.startswith("["):
        for f in info.fields:
            if f.encode_name == step:
                return _fields_at(f.type, rest)
    if isinstance(info, mi.DictType) and step.startswith("["):
        return _fields_at(info.value_type, rest)
    if isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        return _fields_at(info.item_type, rest) if step.startswith("[") else set()
    return set()


def explain(exc: msgspec.ValidationError, target: object) -> str:
    """msgspec's message for a document converted into ``target`` (a type), with the nearest
    accepted key when the problem is an unknown key."""
    text = str(exc)
    match = _UNKNOWN_FIELD.search(text)
    if match is None:
        return text
    name, path = match.group(1), match.group(2) or ""
    steps = [m.group(1) or f"[{m.group(2)}]" for m in _STEP.finditer(path)]
    close = nearest(name, _fields_at(mi.type_info(target), steps))
    return text if close is None else f"{text}; did you mean `{close}`?"
