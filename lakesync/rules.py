"""Declarative sync rules (docs/protocol.md §8): which rows each client sees.

A rules document holds buckets; a row is visible to a client when some bucket covers its table
and all of that bucket's filters match the row's merged state. ``jwt:<claim>`` filter values
resolve to the client's token claims (an array claim acts as a list; a missing claim fails the
filter). Row values are compared in their JavaScript string form; ``gt``/``lt``/``gte``/``lte``
compare numerically when both sides are finite numbers or numeric strings, otherwise by code
points, and never match null.

Rules and schemas (:func:`check_rules`): once a gateway has registered table schemas, its
rules may name only registered tables and, in each bucket, only columns of the tables it covers,
so a typo is refused where it is made (at start, or by the admin route) instead of hiding every
row. A gateway with no schema at all is schemaless and its rules are not checked. Register the
schemas before the rules that name them; schemas only grow, so rules that pass stay valid.

Write access (:func:`write_refusal`, checked by the gateway under its writers' lock), modelled on
PostgreSQL row-level security: a client may write a row only if some bucket covers its table,
the row is in the client's view before the write (``USING``: its merged state is visible, or
the row does not exist: never written, or deleted), and it is still in the view after the
write (``WITH CHECK``: its merged state after is visible, or the row is deleted). A bucket with
``handover: true`` relaxes ``WITH CHECK`` for the rows it shows the writer before the write: the
writer may give such a row away (say, set its ``owner`` to someone else). No rules at all means
every write is allowed.

Relations: a filter's value may be a :class:`Subquery` over another table of the same gateway
(``{"table": "list_members", "select": "list_id", "where": [...]}``): the set of the ``select``
column's values (nulls left out) of that table's live rows matching every ``where`` filter, read
from merged state. ``where`` filters take the same values, a subquery again included, to a
nesting depth of :data:`MAX_SUBQUERY_DEPTH`. A client's subqueries are resolved (bound) before its
rows are judged: :func:`bind_relations` puts their values into the client's claims under
:data:`RELATIONS_CLAIM`, so what decides a view is still "the rules and the (bound) claims", and
a membership change is a change of the affected clients' claims. An unbound subquery matches
nothing: a view never shows a row through a relation nobody resolved.

List semantics, where the protocol is silent: with a list on the right, ``eq`` and ``in`` match when
the row value equals any element, ``neq`` when it equals none, and the ordering operators when
they hold for any element.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from lakesync.canonical import canonical_json, js_number_str
from lakesync.delta import RowDelta, validate_identifier
from lakesync.errors import SchemaError, ValidationError
from lakesync.hints import explain, suggestion
from lakesync.merge import RowState, join_delta
from lakesync.schema import TableSchema

__all__ = [
    "MAX_SUBQUERY_DEPTH",
    "RELATIONS_CLAIM",
    "Bucket",
    "Filter",
    "FilterOp",
    "RelationRows",
    "Subquery",
    "SyncRules",
    "bind_relations",
    "buckets_for",
    "check_rules",
    "claim_holds",
    "claim_keys",
    "claim_values",
    "index_entries",
    "is_bound",
    "lookups",
    "moved_lookups",
    "parse_rules",
    "relation_claims",
    "relation_lookups",
    "relation_name",
    "relation_reader",
    "relation_values",
    "rules_to_wire",
    "subqueries",
    "tables_for",
    "visible",
    "visible_among",
    "write_refusal",
]

FilterOp = Literal["eq", "neq", "in", "gt", "lt", "gte", "lte"]
_NUMERIC = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
JWT_PREFIX = "jwt:"
RELATION_PREFIX = "rel:"
RELATIONS_CLAIM = "lakesync:relations"
"""The claims key :func:`bind_relations` fills: each top-level subquery's name
(:func:`relation_name`) with its resolved values. Binding replaces whatever a token put there."""
MAX_SUBQUERY_DEPTH = 3
"""How deeply subqueries may nest: a subquery in a bucket's filter is at depth 1, one in its
``where`` at depth 2, and so on."""


class Filter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One condition on a row column."""

    column: str
    op: FilterOp
    value: str | list[str] | Subquery


class Subquery(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A filter value read from another table: the ``select`` column of the table's live rows
    that match every ``where`` filter (ANDed), nulls left out, in their string form."""

    table: str
    select: str
    where: list[Filter] = []


class Bucket(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A named set of rows: tables (empty = all) and ANDed filters. ``handover`` (true): a
    client may write a row this bucket shows it so that the row leaves its view (see the module
    docstring); unset, it is left out of the stored and served document, which thus reads as
    it did before the field existed (re-applying unchanged rules is no change)."""

    name: str
    tables: list[str] = []
    filters: list[Filter] = []
    handover: bool | msgspec.UnsetType = msgspec.UNSET


RelationRows = Callable[
    [str, Sequence[tuple[str, Sequence[str]]] | None], Mapping[tuple[str, str], RowState]
]
"""A store's rows of a table, by ``(table, row_id)``: at least those the rules' filter-column
index finds for the lookups (as :func:`relation_lookups` makes them), every row of the table
for None."""


class SyncRules(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A sync rules document; buckets are ORed."""

    version: int
    buckets: list[Bucket]


def parse_rules(obj: object) -> SyncRules:
    """Validate a rules document; :class:`ValidationError` names the offending field."""
    try:
        rules = msgspec.convert(obj, SyncRules)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid sync rules: {explain(exc, SyncRules)}") from None
    if rules.version != 1:
        raise ValidationError(f"invalid sync rules: `$.version` must be 1, got {rules.version}")
    names: set[str] = set()
    for i, bucket in enumerate(rules.buckets):
        where = f"$.buckets[{i}]"
        if not bucket.name:
            raise ValidationError(f"invalid sync rules: `{where}.name` must not be empty")
        if bucket.name in names:
            raise ValidationError(f"invalid sync rules: duplicate bucket name {bucket.name!r}")
        names.add(bucket.name)
        try:
            for j, table in enumerate(bucket.tables):
                validate_identifier(table, f"`{where}.tables[{j}]`")
            _check_filters(bucket.filters, f"{where}.filters", 0)
        except SchemaError as exc:
            raise ValidationError(f"invalid sync rules: {exc.message}") from None
    return rules


def _check_filters(filters: Sequence[Filter], where: str, depth: int) -> None:
    """Identifiers and nesting of filters at ``depth`` subqueries deep (``where``: their path)."""
    for j, f in enumerate(filters):
        validate_identifier(f.column, f"`{where}[{j}].column`")
        sub = f.value
        if not isinstance(sub, Subquery):
            continue
        at = f"{where}[{j}].value"
        if depth + 1 > MAX_SUBQUERY_DEPTH:
            raise SchemaError(f"`{at}` nests subqueries deeper than {MAX_SUBQUERY_DEPTH} levels")
        validate_identifier(sub.table, f"`{at}.table`")
        validate_identifier(sub.select, f"`{at}.select`")
        _check_filters(sub.where, f"{at}.where", depth + 1)


def check_rules(
    rules: SyncRules | None,
    schemas: Mapping[str, TableSchema],
    pending: Collection[str] = (),
) -> None:
    """Raise :class:`SchemaError` naming the bucket, the table and the column (with the nearest
    registered name) when ``rules`` name a table ``schemas`` lacks, or filter a bucket's table on
    a column it lacks (a bucket over every table: on a column no table has). A gateway without
    schemas (``schemas`` empty) is schemaless: nothing is checked. ``pending`` tables (a declared
    connector fills them, and their schema registers and grows as it polls) may be named before
    they have a schema, and their columns are not checked (the source brings them)."""
    if rules is None or not schemas:
        return
    for bucket in rules.buckets:
        where = f"sync rules bucket {bucket.name!r}"
        for table in bucket.tables:
            if table not in schemas and table not in pending:
                raise SchemaError(
                    f"{where} names table {table!r}, which has no registered schema"
                    f"{suggestion(table, schemas, 'tables')} (register a table's schema before "
                    "rules that name it)"
                )
        for f in bucket.filters:
            if isinstance(f.value, Subquery):
                _check_subquery(where, f.value, schemas, pending)
            if bucket.tables:
                for table in (t for t in bucket.tables if t in schemas and t not in pending):
                    columns = schemas[table].column_types()
                    if f.column not in columns:
                        raise SchemaError(
                            f"{where} filters table {table!r} on column {f.column!r}, which "
                            f"its schema does not have{suggestion(f.column, columns, 'columns')}"
                        )
                continue
            everywhere = {c for s in schemas.values() for c in s.column_types()}
            if f.column not in everywhere and not pending:
                raise SchemaError(
                    f"{where} (every table) filters on column {f.column!r}, which no registered "
                    f"table has{suggestion(f.column, everywhere, 'columns')}"
                )


def _check_subquery(
    where: str, sub: Subquery, schemas: Mapping[str, TableSchema], pending: Collection[str]
) -> None:
    """:func:`check_rules` of a subquery: its table is registered (or pending) and has the
    columns it selects and filters on; nested subqueries likewise."""
    if sub.table in pending:
        columns: Collection[str] | None = None
    elif sub.table in schemas:
        columns = schemas[sub.table].column_types()
    else:
        raise SchemaError(
            f"{where} has a subquery over table {sub.table!r}, which has no registered schema"
            f"{suggestion(sub.table, schemas, 'tables')} (register a table's schema before "
            "rules that name it)"
        )
    for role, column in [("selects", sub.select), *(("filters on", f.column) for f in sub.where)]:
        if columns is not None and column not in columns:
            raise SchemaError(
                f"{where} has a subquery over table {sub.table!r} that {role} column "
                f"{column!r}, which its schema does not have"
                f"{suggestion(column, columns, 'columns')}"
            )
    for f in sub.where:
        if isinstance(f.value, Subquery):
            _check_subquery(where, f.value, schemas, pending)


def rules_to_wire(rules: SyncRules) -> dict[str, Any]:
    """The JSON-ready form of a rules document."""
    return msgspec.to_builtins(rules)  # type: ignore[no-any-return]


def _js_string(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return js_number_str(value)
    return canonical_json(value)


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMERIC.fullmatch(value)):
        f = float(value)
    else:
        return None
    return f if math.isfinite(f) else None


def _resolve(value: str | list[str] | Subquery, claims: Mapping[str, Any]) -> list[str] | None:
    """The filter's right-hand side as a list of strings; None when a claim is missing or a
    subquery is not bound (:func:`bind_relations`)."""
    if isinstance(value, list):
        return value
    if isinstance(value, Subquery):
        found = claims.get(RELATIONS_CLAIM)
        if not isinstance(found, Mapping):
            return None
        bound = found.get(relation_name(value))
        return None if bound is None else list(bound)
    if not value.startswith(JWT_PREFIX):
        return [value]
    claim = claims.get(value[len(JWT_PREFIX) :])
    if claim is None:
        return None
    if isinstance(claim, list | tuple):
        return [_js_string(c) for c in claim]
    return [_js_string(claim)]


def claim_values(
    rules: SyncRules, claims: Mapping[str, Any]
) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """What of ``claims`` the filters of ``rules`` read: each ``jwt:<claim>`` they name with
    its resolved value (None when missing), and each subquery of a bucket's filters by its
    :func:`relation_name` with its bound values (None when unbound), in name order. Visibility
    under ``rules`` depends on the claims through this alone, so tokens with equal values see
    the same rows."""
    named: dict[str, str | Subquery] = {}
    for b in rules.buckets:
        for f in b.filters:
            if isinstance(f.value, Subquery):
                named[relation_name(f.value)] = f.value
            elif isinstance(f.value, str) and f.value.startswith(JWT_PREFIX):
                named[f.value] = f.value
    out = []
    for name in sorted(named):
        resolved = _resolve(named[name], claims)
        out.append((name, None if resolved is None else tuple(resolved)))
    return tuple(out)


def relation_name(sub: Subquery) -> str:
    """A subquery's name: ``rel:`` and its canonical JSON (equal subqueries, equal names)."""
    return RELATION_PREFIX + msgspec.json.encode(sub).decode()


def subqueries(rules: SyncRules | None) -> list[Subquery]:
    """Every distinct subquery of ``rules``, nested ones before those whose ``where`` holds
    them (the order :func:`bind_relations` resolves them in)."""
    out: dict[str, Subquery] = {}

    def walk(filters: Sequence[Filter]) -> None:
        for f in filters:
            if isinstance(f.value, Subquery):
                walk(f.value.where)
                out.setdefault(relation_name(f.value), f.value)

    for b in rules.buckets if rules is not None else ():
        walk(b.filters)
    return list(out.values())


def relation_values(
    sub: Subquery, claims: Mapping[str, Any], rows: Iterable[Mapping[str, Any] | None]
) -> list[str]:
    """The values of ``sub`` among ``rows`` (live rows of its table, or more: those that do
    not match are left out; None = absent): the sorted distinct string forms of the ``select``
    column of those matching every ``where`` filter under ``claims``, nulls left out. Nested
    subqueries read ``claims`` as bound so far."""
    out: set[str] = set()
    for row in rows:
        if row is None:
            continue
        value = row.get(sub.select)
        if value is not None and all(_matches(f, claims, row) for f in sub.where):
            out.add(_js_string(value))
    return sorted(out)


def bind_relations(
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    read: Callable[[Subquery, Mapping[str, Any]], Iterable[Mapping[str, Any] | None]],
) -> dict[str, Any]:
    """``claims`` with every subquery of ``rules`` resolved under :data:`RELATIONS_CLAIM`
    (the top-level ones: nested ones only decide those). ``read(sub, claims so far)`` gives the
    merged visible state of (at least) every live row of ``sub.table`` that may match it; the
    I/O edge reads them (by index, when ``sub`` has an equality filter)."""
    bound: dict[str, Any] = {k: v for k, v in claims.items() if k != RELATIONS_CLAIM}
    subs = subqueries(rules)
    if not subs:
        return bound
    values: dict[str, list[str]] = {}
    bound[RELATIONS_CLAIM] = values
    for sub in subs:
        values[relation_name(sub)] = relation_values(sub, bound, read(sub, bound))
    assert rules is not None
    top = {
        relation_name(f.value)
        for b in rules.buckets
        for f in b.filters
        if isinstance(f.value, Subquery)
    }
    bound[RELATIONS_CLAIM] = {k: v for k, v in values.items() if k in top}
    return bound


def _ordered(op: str, left: Any, right: str) -> bool:
    ln, rn = _as_number(left), _as_number(right)
    a: float | str
    b: float | str
    if ln is not None and rn is not None:
        a, b = ln, rn
    else:
        a, b = _js_string(left), right
    if op == "gt":
        return a > b  # type: ignore[operator]
    if op == "lt":
        return a < b  # type: ignore[operator]
    if op == "gte":
        return a >= b  # type: ignore[operator]
    return a <= b  # type: ignore[operator]


def _matches(f: Filter, claims: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    rhs = _resolve(f.value, claims)
    if rhs is None:
        return False
    value = row.get(f.column)
    if f.op in ("eq", "in"):
        return _js_string(value) in rhs
    if f.op == "neq":
        return _js_string(value) not in rhs
    if value is None:
        return False
    return any(_ordered(f.op, value, r) for r in rhs)


def _bucket_matches(
    bucket: Bucket, claims: Mapping[str, Any], table: str, row: Mapping[str, Any]
) -> bool:
    if bucket.tables and table not in bucket.tables:
        return False
    return all(_matches(f, claims, row) for f in bucket.filters)


def buckets_for(
    rules: SyncRules | None, claims: Mapping[str, Any], table: str, row: Mapping[str, Any] | None
) -> list[str]:
    """Names of the buckets a live row falls in for this client (none for an absent row)."""
    if row is None or rules is None:
        return []
    return [b.name for b in rules.buckets if _bucket_matches(b, claims, table, row)]


def visible(
    rules: SyncRules | None, claims: Mapping[str, Any], table: str, row: Mapping[str, Any] | None
) -> bool:
    """Whether a row (its merged visible state; None = absent) is visible to this client."""
    if row is None:
        return False
    if rules is None:
        return True
    return any(_bucket_matches(b, claims, table, row) for b in rules.buckets)


def visible_among(
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    rows: Sequence[tuple[str, Mapping[str, Any] | None]],
) -> list[bool]:
    """:func:`visible` of each of many ``(table, row)`` at once, the same answers: each filter
    is applied to one column of the rows still in question, with its claims resolved once (a
    checkpoint chunk of thousands of rows costs a few list passes, not a call chain per row)."""
    if rules is None:
        return [row is not None for _, row in rows]
    shown = [False] * len(rows)
    for b in rules.buckets:
        tables = frozenset(b.tables)
        left = [
            i
            for i, (table, row) in enumerate(rows)
            if row is not None and not shown[i] and (not tables or table in tables)
        ]
        for f in b.filters:
            if not left:
                break
            rhs = _resolve(f.value, claims)
            if rhs is None:  # a missing claim fails the filter for every row
                left = []
                break
            values = [rows[i][1].get(f.column) for i in left]  # type: ignore[union-attr]
            if f.op in ("eq", "in", "neq"):
                accepted = frozenset(rhs)
                keep = f.op != "neq"
                # Most values are strings: their string form is themselves (no call).
                left = [
                    i
                    for i, v in zip(left, values, strict=True)
                    if ((v if type(v) is str else _js_string(v)) in accepted) is keep
                ]
            else:
                left = [
                    i
                    for i, v in zip(left, values, strict=True)
                    if v is not None and any(_ordered(f.op, v, r) for r in rhs)
                ]
        for i in left:
            shown[i] = True
    return shown


def tables_for(rules: SyncRules | None, claims: Mapping[str, Any]) -> set[str] | None:
    """Tables this client may read (and the only ones it may write: see
    :func:`write_refusal`); None means every table."""
    if rules is None:
        return None
    tables: set[str] = set()
    for b in rules.buckets:
        if not b.tables:
            return None
        tables.update(b.tables)
    return tables


def _index_columns(rules: SyncRules) -> set[str]:
    """The columns of the buckets' ``eq``/``in`` filters and of their subqueries' (binding
    a client's subqueries then reads its relation rows by index too)."""
    columns = {f.column for b in rules.buckets for f in b.filters if f.op in ("eq", "in")}
    for sub in subqueries(rules):
        columns.update(f.column for f in sub.where if f.op in ("eq", "in"))
    return columns


def _index_key(text: str) -> str:
    # Fixed-size, NUL-free keys whatever the value (PostgreSQL text cannot hold NUL).
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def index_entries(rules: SyncRules | None, row: Mapping[str, Any] | None) -> set[tuple[str, str]]:
    """``(column, key of its string form)`` of a live row for every column an ``eq``/``in``
    filter of the rules names (a missing column reads as null): what a store indexes so that
    :func:`lookups` finds a client's rows without reading every row."""
    if rules is None or row is None:
        return set()
    return {(c, _index_key(_js_string(row.get(c)))) for c in _index_columns(rules)}


def lookups(rules: SyncRules, claims: Mapping[str, Any]) -> list[tuple[str, list[str]]] | None:
    """Index lookups ``(column, keys)`` (as :func:`index_entries` makes them) whose matches
    include every row visible to this client: one ``eq``/``in`` filter per bucket (buckets
    whose claim is missing match nothing). None when some bucket has no such filter: only a
    full scan finds its rows."""
    out: list[tuple[str, list[str]]] = []
    for b in rules.buckets:
        usable = [f for f in b.filters if f.op in ("eq", "in")]
        if not usable:
            return None
        rhs = _resolve(usable[0].value, claims)
        if rhs is not None:
            out.append((usable[0].column, [_index_key(v) for v in rhs]))
    return out


def relation_lookups(
    sub: Subquery, claims: Mapping[str, Any]
) -> list[tuple[str, list[str]]] | None:
    """Index lookups (as :func:`lookups` makes them) whose matches include every row of
    ``sub.table`` that matches ``sub.where`` under ``claims`` (bound so far): its first
    ``eq``/``in`` filter. None when it has none: only a scan of the table finds them."""
    usable = next((f for f in sub.where if f.op in ("eq", "in")), None)
    if usable is None:
        return None
    rhs = _resolve(usable.value, claims) or []
    return [(usable.column, [_index_key(v) for v in rhs])]


def relation_claims(
    rules: SyncRules, table: str, row: Mapping[str, Any] | None
) -> set[tuple[str, str]] | None:
    """``(jwt:<claim>, value)`` pairs naming the clients whose bound subqueries a row of
    ``table`` in this state can count in: per subquery of a bucket's filters over ``table``,
    its first ``eq``/``in`` filter on a claim with the row's value (empty for an absent row).
    None when some subquery reading ``table`` has no such filter or is nested (a change may
    move any client's view)."""
    out: set[tuple[str, str]] = set()
    top = {
        relation_name(f.value)
        for b in rules.buckets
        for f in b.filters
        if isinstance(f.value, Subquery)
    }
    for sub in subqueries(rules):
        if sub.table != table:
            continue
        f = next(
            (
                f
                for f in sub.where
                if f.op in ("eq", "in")
                and isinstance(f.value, str)
                and f.value.startswith(JWT_PREFIX)
            ),
            None,
        )
        if f is None or relation_name(sub) not in top:
            return None
        if row is not None:
            assert isinstance(f.value, str)
            out.add((f.value, _js_string(row.get(f.column))))
    return out


def is_bound(rules: SyncRules, claims: Mapping[str, Any]) -> bool:
    """Whether ``claims`` hold a binding (:func:`bind_relations`) of every subquery of the
    buckets of ``rules`` (claims bound under other rules may lack some)."""
    found = claims.get(RELATIONS_CLAIM)
    names = found if isinstance(found, Mapping) else {}
    return all(
        relation_name(f.value) in names
        for b in rules.buckets
        for f in b.filters
        if isinstance(f.value, Subquery)
    )


def claim_holds(claims: Mapping[str, Any], name: str, value: str) -> bool:
    """Whether ``jwt:<claim>`` ``name`` resolves, under ``claims``, to a list holding
    ``value`` (as :func:`relation_claims` pairs name clients)."""
    return value in (_resolve(name, claims) or ())


def moved_lookups(
    rules: SyncRules, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[tuple[str, list[str]]] | None:
    """Index lookups (as :func:`lookups` makes them) whose matches include every row whose
    visibility differs between two bindings of one client's claims (:func:`bind_relations`;
    the same token): the rows whose filter column holds a value one binding of a subquery has
    and the other lacks. None when some subquery filter is not ``eq``/``in`` (only a scan
    tells which rows moved)."""
    out: list[tuple[str, list[str]]] = []
    for b in rules.buckets:
        for f in b.filters:
            if not isinstance(f.value, Subquery):
                continue
            if f.op not in ("eq", "in"):  # only these columns are indexed
                return None
            old = set(_resolve(f.value, before) or ())
            new = set(_resolve(f.value, after) or ())
            if old != new:
                out.append((f.column, [_index_key(v) for v in sorted(old ^ new)]))
    return out


def _covers(bucket: Bucket, table: str) -> bool:
    return not bucket.tables or table in bucket.tables


def claim_keys(
    rules: SyncRules, table: str, row: Mapping[str, Any] | None
) -> set[tuple[str, str]] | None:
    """``(jwt:<claim>, value)`` pairs, one of which a token's claims must resolve to (as in
    :func:`claim_values`) for the row to be visible to it: per bucket covering the table, its
    first ``eq``/``in`` filter on a claim or a subquery (named as :func:`claim_values` names
    it), with the row's value. Empty for an absent row; None when some bucket covering the
    table has no such filter (no claim narrows who sees it)."""
    if row is None:
        return set()
    out = set()
    for b in rules.buckets:
        if not _covers(b, table):
            continue
        f = next(
            (
                f
                for f in b.filters
                if f.op in ("eq", "in")
                and (
                    isinstance(f.value, Subquery)
                    or (isinstance(f.value, str) and f.value.startswith(JWT_PREFIX))
                )
            ),
            None,
        )
        if f is None:
            return None
        name = relation_name(f.value) if isinstance(f.value, Subquery) else f.value
        assert isinstance(name, str)
        out.add((name, _js_string(row.get(f.column))))
    return out


def relation_reader(
    rows: RelationRows, overlay: Mapping[tuple[str, str], RowState] | None = None
) -> Callable[[Subquery, Mapping[str, Any]], list[Mapping[str, Any] | None]]:
    """A ``read`` for :func:`bind_relations` over a store's ``rows`` (looked up by index when
    the subquery allows it), with the states of ``overlay`` (rows a batch is changing) in place
    of the stored ones."""

    def read(sub: Subquery, claims: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
        found = dict(rows(sub.table, relation_lookups(sub, claims)))
        found.update({k: s for k, s in (overlay or {}).items() if k[0] == sub.table})
        return [s.visible() for s in found.values()]

    return read


def write_refusal(
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    deltas: Sequence[RowDelta],
    states: Mapping[tuple[str, str], RowState],
    relations: RelationRows | None = None,
) -> tuple[int, str] | None:
    """The first of ``deltas`` this client may not write, as ``(position, reason)``, or None
    when it may write them all (see the module docstring). ``states`` holds the merged state of
    every stored row the deltas touch (left out: never written); each delta is checked against
    its row's state just before it, with the earlier deltas of the sequence merged in, so a
    batch is judged as the same deltas pushed one at a time. Subqueries are bound through
    ``relations`` (left out: they match nothing), again after each delta of a table they read.
    The reason names the table and the buckets that cover it."""
    if rules is None:
        return None
    subs = subqueries(rules)
    read = {s.table for s in subs}
    current: dict[tuple[str, str], RowState] = {}
    # Only binding decides subqueries: whatever a token put under the reserved claim goes.
    bound: Mapping[str, Any] = (
        {k: v for k, v in claims.items() if k != RELATIONS_CLAIM} if subs else claims
    )
    stale = bool(subs) and relations is not None
    for i, d in enumerate(deltas):
        key = (d.table, d.row_id)
        if key not in current:
            stored = states.get(key) or RowState()
            current[key] = RowState(dict(stored.cells), stored.write, stored.tombstone)
        if stale:
            assert relations is not None
            bound = bind_relations(rules, claims, relation_reader(relations, current))
            stale = False
        reason = _refusal(rules, bound, d, current[key])
        if reason is not None:
            return i, reason
        stale = d.table in read and relations is not None
    return None


def _refusal(
    rules: SyncRules, claims: Mapping[str, Any], d: RowDelta, state: RowState
) -> str | None:
    """Why the client may not write ``d`` onto its row in ``state`` (None: it may; ``d`` is then
    merged into ``state``)."""
    covering = [b for b in rules.buckets if _covers(b, d.table)]
    if not covering:
        return f"no bucket of the sync rules covers table {d.table!r}: no write access"
    names = ", ".join(repr(b.name) for b in covering)
    before = state.visible()
    holding = (
        []
        if before is None
        else [b for b in covering if _bucket_matches(b, claims, d.table, before)]
    )
    if before is not None and not holding:
        return (
            f"row {d.row_id!r} of {d.table!r} is not in this client's view (USING):"
            f" no bucket covering the table ({names}) shows it"
        )
    join_delta(state, d)
    after = state.visible()
    if after is None or any(_bucket_matches(b, claims, d.table, after) for b in covering):
        return None  # deleted, or still in the view
    if any(b.handover is True for b in holding):
        return None  # a bucket that showed the row lets the writer give it away
    return (
        f"the write would leave row {d.row_id!r} of {d.table!r} outside this client's view"
        f" (WITH CHECK): no bucket covering the table ({names}) shows the row after it"
        + ("" if before is None else ", and none that showed it allows handover")
    )
