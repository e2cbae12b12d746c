"""Relational sync rules: a filter's value may be a subquery over another table, resolved
(bound into the claims) from merged state. The evaluation is held to a brute-force reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.delta import RowDelta
from lakesync.errors import SchemaError, ValidationError
from lakesync.merge import RowState, join_delta
from lakesync.rules import (
    MAX_SUBQUERY_DEPTH,
    RELATIONS_CLAIM,
    Filter,
    Subquery,
    SyncRules,
    bind_relations,
    check_rules,
    claim_keys,
    claim_values,
    index_entries,
    lookups,
    moved_lookups,
    parse_rules,
    relation_claims,
    relation_lookups,
    relation_reader,
    rules_to_wire,
    subqueries,
    visible,
    visible_among,
    write_refusal,
)
from lakesync.schema import parse_schema

MEMBER_OF = {
    "table": "list_members",
    "select": "list_id",
    "where": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
}


def shared_lists(value: object = MEMBER_OF) -> SyncRules:
    return parse_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "shared",
                    "tables": ["todos"],
                    "filters": [{"column": "list_id", "op": "in", "value": value}],
                }
            ],
        }
    )


def nested(depth: int) -> dict[str, Any]:
    """A subquery ``depth`` levels deep (each level a list of lists)."""
    sub: dict[str, Any] = {"table": "t", "select": "c", "where": []}
    for _ in range(depth - 1):
        sub = {"table": "t", "select": "c", "where": [{"column": "c", "op": "in", "value": sub}]}
    return sub


def rows_reader(db: dict[str, list[dict[str, Any]]]) -> Any:
    return lambda sub, _claims: db.get(sub.table, [])


def test_a_subquery_value_parses_and_round_trips() -> None:
    rules = shared_lists()
    value = rules.buckets[0].filters[0].value
    assert isinstance(value, Subquery)
    assert value.table == "list_members"
    assert value.where == [Filter("user_id", "eq", "jwt:sub")]
    assert parse_rules(rules_to_wire(rules)) == rules
    assert subqueries(rules) == [value]


def test_nesting_to_the_documented_depth_is_accepted_and_deeper_refused() -> None:
    assert MAX_SUBQUERY_DEPTH >= 2
    shared_lists(nested(MAX_SUBQUERY_DEPTH))
    with pytest.raises(ValidationError) as info:
        shared_lists(nested(MAX_SUBQUERY_DEPTH + 1))
    assert f"deeper than {MAX_SUBQUERY_DEPTH} levels" in info.value.message
    assert "$.buckets[0].filters[0].value.where[0].value" in info.value.message


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({**MEMBER_OF, "table": "bad name"}, "filters[0].value.table"),
        ({**MEMBER_OF, "select": ""}, "filters[0].value.select"),
        ({**MEMBER_OF, "where": [{"column": "a b", "op": "eq", "value": "x"}]}, "where[0].column"),
        ({**MEMBER_OF, "colour": "red"}, "colour"),
        ({"table": "list_members", "where": []}, "select"),
    ],
)
def test_malformed_subqueries_are_refused_naming_the_field(value: object, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        shared_lists(value)
    assert needle in info.value.message, info.value.message


SCHEMAS = {
    name: parse_schema({"table": name, "columns": [{"name": c, "type": "string"} for c in cols]})
    for name, cols in {
        "todos": ["title", "list_id"],
        "list_members": ["list_id", "user_id"],
        "lists": ["id", "owner"],
    }.items()
}


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        (
            {**MEMBER_OF, "table": "list_member"},
            ["bucket 'shared'", "table 'list_member'", "no registered schema",
             "did you mean 'list_members'?"],
        ),
        (
            {**MEMBER_OF, "select": "listid"},
            ["table 'list_members'", "selects column 'listid'", "did you mean 'list_id'?"],
        ),
        (
            {**MEMBER_OF, "where": [{"column": "usr_id", "op": "eq", "value": "jwt:sub"}]},
            ["filters on column 'usr_id'", "did you mean 'user_id'?"],
        ),
        (
            {**MEMBER_OF, "where": [{"column": "list_id", "op": "in", "value": {
                "table": "lists", "select": "idd", "where": []}}]},
            ["table 'lists'", "selects column 'idd'", "did you mean 'id'?"],
        ),
    ],
    ids=["table", "select", "where", "nested"],
)
def test_subqueries_naming_what_no_schema_has_are_refused(
    value: object, needles: list[str]
) -> None:
    with pytest.raises(SchemaError) as info:
        check_rules(shared_lists(value), SCHEMAS)
    assert info.value.status == 422
    for needle in needles:
        assert needle in info.value.message, info.value.message


def test_subqueries_over_registered_or_pending_tables_pass() -> None:
    check_rules(shared_lists(), SCHEMAS)
    check_rules(shared_lists({**MEMBER_OF, "table": "members"}), SCHEMAS, pending={"members"})
    check_rules(shared_lists({**MEMBER_OF, "table": "anything"}), {})  # schemaless


def test_an_unbound_subquery_matches_nothing() -> None:
    """A view never shows a row through a relation nobody resolved, whatever the token says."""
    rules = shared_lists()
    row = {"list_id": "l1"}
    assert not visible(rules, {"sub": "u1"}, "todos", row)
    name = claim_values(rules, {})[0][0]
    forged = {"sub": "u1", RELATIONS_CLAIM: {name: ["l1"]}}
    bound = bind_relations(rules, forged, rows_reader({}))
    assert not visible(rules, bound, "todos", row)  # binding replaces what the token put there


def test_membership_decides_the_view_and_its_key() -> None:
    rules = shared_lists()
    db = {"list_members": [{"list_id": "l1", "user_id": "u1"},
                           {"list_id": "l2", "user_id": "u2"},
                           {"list_id": None, "user_id": "u1"}]}
    bound = bind_relations(rules, {"sub": "u1"}, rows_reader(db))
    assert visible(rules, bound, "todos", {"list_id": "l1"})
    assert not visible(rules, bound, "todos", {"list_id": "l2"})
    assert not visible(rules, bound, "todos", {})  # nulls are left out of a subquery's values
    before = claim_values(rules, bound)
    db["list_members"].append({"list_id": "l2", "user_id": "u1"})
    after = claim_values(rules, bind_relations(rules, {"sub": "u1"}, rows_reader(db)))
    assert before != after  # a membership change is a change of the client's view key
    assert after[0][1] == ("l1", "l2")
    name = after[0][0]
    assert claim_keys(rules, "todos", {"list_id": "l2"}) == {(name, "l2")}


def test_index_entries_and_lookups_follow_relations() -> None:
    rules = shared_lists()
    sub = subqueries(rules)[0]
    member = {"list_id": "l1", "user_id": "u1"}
    entries = index_entries(rules, member)
    plan = relation_lookups(sub, {"sub": "u1"})
    assert plan is not None
    ((column, keys),) = plan
    assert (column, keys[0]) in entries  # the index finds a client's memberships
    bound = bind_relations(rules, {"sub": "u1"}, rows_reader({"list_members": [member]}))
    found = lookups(rules, bound)
    assert found is not None
    ((column, keys),) = found
    assert column == "list_id"
    assert (column, keys[0]) in index_entries(rules, {"list_id": "l1"})
    assert relation_lookups(Subquery("t", "c", [Filter("c", "neq", "x")]), {}) is None


# -- the evaluation against a brute-force reference --------------------------------------------

_NAMES = ["a", "b", "c"]
_TABLES = ["todos", "members", "lists"]
_COLUMNS = ["x", "y"]


def _filters(depth: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    plain = st.one_of(
        st.sampled_from([*_NAMES, "jwt:sub", "jwt:teams", "jwt:missing"]),
        st.lists(st.sampled_from(_NAMES), max_size=2),
    )
    value = plain if depth == MAX_SUBQUERY_DEPTH else st.one_of(plain, _subquery(depth + 1))
    return st.lists(
        st.fixed_dictionaries(
            {
                "column": st.sampled_from(_COLUMNS),
                "op": st.sampled_from(["eq", "in", "neq"]),
                "value": value,
            }
        ),
        max_size=2,
    )


def _subquery(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "table": st.sampled_from(_TABLES),
            "select": st.sampled_from(_COLUMNS),
            "where": st.deferred(lambda: _filters(depth)),
        }
    )


_ROWS = st.lists(
    st.tuples(
        st.sampled_from(_TABLES),
        st.dictionaries(st.sampled_from(_COLUMNS), st.sampled_from(_NAMES), max_size=2),
    ),
    max_size=8,
)


def _reference_rhs(value: Any, claims: dict[str, Any], db: list[tuple[str, dict[str, Any]]]
                   ) -> set[str] | None:
    if isinstance(value, dict):  # a subquery: straight from its definition
        return {
            row[value["select"]]
            for table, row in db
            if table == value["table"]
            and row.get(value["select"]) is not None
            and all(_reference_match(f, claims, row, db) for f in value["where"])
        }
    if isinstance(value, list):
        return set(value)
    if value.startswith("jwt:"):
        claim = claims.get(value[4:])
        if claim is None:
            return None
        return set(claim) if isinstance(claim, list) else {claim}
    return {value}


def _reference_match(f: dict[str, Any], claims: dict[str, Any], row: dict[str, Any],
                     db: list[tuple[str, dict[str, Any]]]) -> bool:
    rhs = _reference_rhs(f["value"], claims, db)
    if rhs is None:
        return False
    held = row.get(f["column"], "null") in rhs
    return held if f["op"] in ("eq", "in") else not held


@settings(max_examples=300, deadline=None)
@given(
    buckets=st.lists(
        st.fixed_dictionaries(
            {"tables": st.sampled_from([[], ["todos"], ["lists"]]), "filters": _filters(0)}
        ),
        max_size=3,
    ),
    db=_ROWS,
    claims=st.fixed_dictionaries(
        {"sub": st.sampled_from(_NAMES)},
        optional={"teams": st.lists(st.sampled_from(_NAMES), max_size=2)},
    ),
)
def test_visibility_through_relations_matches_a_brute_force_reference(
    buckets: list[dict[str, Any]], db: list[tuple[str, dict[str, Any]]], claims: dict[str, Any]
) -> None:
    rules = parse_rules(
        {"version": 1,
         "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)]}
    )

    def read(sub: Subquery, _bound: Any) -> list[dict[str, Any]]:
        return [row for table, row in db if table == sub.table]

    bound = bind_relations(rules, claims, read)
    expected = [
        any(
            (not b["tables"] or table in b["tables"])
            and all(_reference_match(f, claims, row, db) for f in b["filters"])
            for b in buckets
        )
        for table, row in db
    ]
    assert [visible(rules, bound, table, row) for table, row in db] == expected
    assert visible_among(rules, bound, db) == expected
    plan = lookups(rules, bound)
    if plan is not None:  # the index finds every visible row
        for (table, row), shown in zip(db, expected, strict=True):
            if shown:
                entries = index_entries(rules, row)
                assert any((c, k) in entries for c, keys in plan for k in keys), (table, row)


def test_writes_are_judged_through_the_relation_one_delta_at_a_time() -> None:
    """A batch is judged as its deltas pushed one at a time: a membership it adds (or removes)
    counts for the writes after it."""
    rules = parse_rules(
        {
            "version": 1,
            "buckets": [
                rules_to_wire(shared_lists())["buckets"][0],
                {"name": "own", "tables": ["list_members"],
                 "filters": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}]},
            ],
        }
    )
    stored = {("list_members", "m1"): state_of("m1", user_id="u1", list_id="l1")}

    def relations(table: str, _plan: object) -> dict[tuple[str, str], RowState]:
        return {k: v for k, v in stored.items() if k[0] == table}

    claims = {"sub": "u1"}
    into = RowDelta.create("INSERT", "todos", "t1", "u1", {"list_id": "l1"}, 1 << 16)
    elsewhere = RowDelta.create("INSERT", "todos", "t2", "u1", {"list_id": "l2"}, 2 << 16)
    join = RowDelta.create("INSERT", "list_members", "m2", "u1",
                           {"user_id": "u1", "list_id": "l2"}, 3 << 16)
    leave = RowDelta.create("DELETE", "list_members", "m1", "u1", {}, 4 << 16)
    assert write_refusal(rules, claims, [into], {}, relations) is None
    refused = write_refusal(rules, claims, [elsewhere], {}, relations)
    assert refused is not None and "WITH CHECK" in refused[1]
    assert write_refusal(rules, claims, [join, elsewhere], {}, relations) is None
    states = dict(stored)
    refused = write_refusal(rules, claims, [leave, into], states, relations)
    assert refused is not None and refused[0] == 1
    # Without a reader, subqueries match nothing: the write is refused, never let through.
    assert write_refusal(rules, claims, [into], {}) is not None
    # A token that brings its own bound relations (u1's) decides nothing for u2: only
    # binding does, so with or without a reader the write into l1 is refused.
    forged = {"sub": "u2", RELATIONS_CLAIM: bind_relations(
        rules, claims, relation_reader(relations, {}))[RELATIONS_CLAIM]}
    into_as_u2 = RowDelta.create("INSERT", "todos", "t3", "u2", {"list_id": "l1"}, 5 << 16)
    assert write_refusal(rules, forged, [into_as_u2], {}) is not None
    assert write_refusal(rules, forged, [into_as_u2], {}, relations) is not None


def state_of(row_id: str, **values: Any) -> RowState:
    state = RowState()
    join_delta(state, RowDelta.create("INSERT", "list_members", row_id, "root", values, 1))
    return state


@settings(max_examples=200, deadline=None)
@given(before=_ROWS, after=_ROWS, rows=_ROWS, sub=st.sampled_from(_NAMES),
       op=st.sampled_from(["eq", "in", "neq"]))
def test_moved_lookups_find_every_row_whose_visibility_a_rebinding_changes(
    before: list[tuple[str, dict[str, Any]]],
    after: list[tuple[str, dict[str, Any]]],
    rows: list[tuple[str, dict[str, Any]]],
    sub: str,
    op: str,
) -> None:
    """Two states of the relation (``before``, ``after``): the rows whose visibility differs
    are found by the index lookups of the values that changed (or a scan is asked for)."""
    rules = parse_rules({"version": 1, "buckets": [{"name": "b", "tables": ["todos"], "filters": [
        {"column": "x", "op": op, "value": {"table": "members", "select": "x",
                                            "where": [{"column": "y", "op": "eq",
                                                       "value": "jwt:sub"}]}}]}]})
    old = bind_relations(rules, {"sub": sub}, rows_reader(_tables(before)))
    new = bind_relations(rules, {"sub": sub}, rows_reader(_tables(after)))
    plan = moved_lookups(rules, old, new)
    if op == "neq":
        assert plan is None
        return
    assert plan is not None
    for table, row in rows:
        if visible(rules, old, table, row) != visible(rules, new, table, row):
            entries = index_entries(rules, row)
            assert any((c, k) in entries for c, keys in plan for k in keys), row
    # Who may be concerned: the clients a relation row names through its claim.
    for table, row in before + after:
        pairs = relation_claims(rules, table, row)
        assert pairs == ({("jwt:sub", row.get("y", "null"))} if table == "members" else set())


def _tables(rows: list[tuple[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table, row in rows:
        out.setdefault(table, []).append(row)
    return out


def test_a_nested_relation_may_concern_any_client() -> None:
    rules = shared_lists(nested(2))
    assert relation_claims(rules, "t", {"c": "x"}) is None
    assert relation_claims(shared_lists(), "list_members", None) == set()
