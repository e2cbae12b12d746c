"""Sync rules (docs/protocol.md §8): operators, jwt: claims, comparisons, buckets, and document
validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.connector_specs import parse_connectors, tables_by_gateway
from lakesync.errors import SchemaError, ValidationError
from lakesync.rules import (
    SyncRules,
    buckets_for,
    check_rules,
    index_entries,
    lookups,
    parse_rules,
    rules_to_wire,
    tables_for,
    visible,
    visible_among,
)
from lakesync.schema import parse_schema

CLAIMS: dict[str, Any] = {"sub": "u1", "teams": ["t1", "t2"], "level": "10", "role": "client"}


def one_filter(op: str, value: str | list[str], column: str = "v") -> SyncRules:
    return parse_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "b",
                    "tables": [],
                    "filters": [{"column": column, "op": op, "value": value}],
                }
            ],
        }
    )


MISSING = object()

# (op, filter value, row value (MISSING = the row lacks the column), visible?)
OPERATOR_CASES: list[tuple[str, str | list[str], Any, bool]] = [
    ("eq", "a", "a", True),
    ("eq", "a", "b", False),
    ("eq", "a", "A", False),
    ("eq", "1", 1, True),
    ("eq", "1", 1.0, True),  # a row value is compared as JavaScript prints it
    ("eq", "1.5", 1.5, True),
    ("eq", "1e+21", 1e21, True),
    ("eq", "true", True, True),
    ("eq", "false", False, True),
    ("eq", "1", True, False),
    ("eq", "null", None, True),
    ("eq", "null", MISSING, True),  # a row lacking the column has it as null
    ("eq", "x", MISSING, False),
    ("eq", ["a", "b"], "b", True),
    ("neq", "a", "b", True),
    ("neq", "a", "a", False),
    ("neq", "1", 1.0, False),
    ("neq", "x", MISSING, True),
    ("neq", ["a", "b"], "b", False),
    ("neq", ["a", "b"], "c", True),
    ("in", ["a", "b"], "b", True),
    ("in", ["a", "b"], "c", False),
    ("in", ["1", "2"], 2, True),
    ("in", ["true"], True, True),
    ("in", "a", "a", True),
    ("in", [], "a", False),
    # numeric when both sides are numbers or numeric strings
    ("gt", "9", 10, True),
    ("gt", "9", "10", True),
    ("gt", "10", "9", False),
    ("gt", "9.5", 10, True),
    ("gt", "999", "1e3", True),
    ("gt", "-1", 0, True),
    ("lt", "10", 9, True),
    ("lt", "10", "9", True),
    ("lt", "10", 10, False),
    ("gte", "10", 10, True),
    ("gte", "10", 10.0, True),
    ("gte", "10", 9.99, False),
    ("lte", "10", 10, True),
    ("lte", "10", 11, False),
    # code points otherwise
    ("gt", "abc", "abd", True),
    ("gt", "abd", "abc", False),
    ("lt", "abd", "abc", True),
    ("gt", "z", "é", True),
    ("gt", "\ue000", "😀", True),  # by code point U+1F600 > U+E000 (UTF-16 order would differ)
    ("gt", "10", "abc", True),  # not both numeric: "abc" > "10" as strings
    ("gte", "abc", "abc", True),
    ("lte", "abc", "abd", False),
    ("gt", "false", True, True),  # booleans compare as "true"/"false", not numbers
    # null never matches an ordering operator
    ("gt", "0", None, False),
    ("lt", "zzz", None, False),
    ("gte", "null", None, False),
    ("lte", "null", None, False),
    ("lt", "zzz", MISSING, False),
    ("gt", ["1", "100"], 50, True),
    ("lt", ["1", "2"], 50, False),
]


@pytest.mark.parametrize(("op", "value", "row_value", "expected"), OPERATOR_CASES)
def test_operator(op: str, value: str | list[str], row_value: Any, expected: bool) -> None:
    row = {} if row_value is MISSING else {"v": row_value}
    assert visible(one_filter(op, value), CLAIMS, "todos", row) is expected


# (op, jwt: value, row value, visible?)
JWT_CASES: list[tuple[str, str, Any, bool]] = [
    ("eq", "jwt:sub", "u1", True),
    ("eq", "jwt:sub", "u2", False),
    ("eq", "jwt:teams", "t2", True),  # an array claim acts as a list
    ("eq", "jwt:teams", "t3", False),
    ("in", "jwt:teams", "t1", True),
    ("neq", "jwt:teams", "t3", True),
    ("neq", "jwt:teams", "t1", False),
    ("gt", "jwt:level", 11, True),
    ("gt", "jwt:level", 9, False),
    ("eq", "jwt:missing", "u1", False),  # a missing claim fails the filter...
    ("neq", "jwt:missing", "anything", False),  # ...whatever the operator
    ("eq", "jwt:missing", None, False),
    ("lt", "jwt:missing", 1, False),
]


@pytest.mark.parametrize(("op", "value", "row_value", "expected"), JWT_CASES)
def test_jwt_claims(op: str, value: str, row_value: Any, expected: bool) -> None:
    assert visible(one_filter(op, value), CLAIMS, "todos", {"v": row_value}) is expected


def test_jwt_claim_value_is_not_a_literal() -> None:
    rules = one_filter("eq", "jwt:sub")
    assert not visible(rules, CLAIMS, "todos", {"v": "jwt:sub"})


RULES = parse_rules(
    {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "filters": [
                    {"column": "owner", "op": "eq", "value": "jwt:sub"},
                    {"column": "done", "op": "eq", "value": "false"},
                ],
            },
            {
                "name": "team",
                "tables": ["todos", "notes"],
                "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}],
            },
            {"name": "public", "filters": [{"column": "public", "op": "eq", "value": "true"}]},
        ],
    }
)


@pytest.mark.parametrize(
    ("table", "row", "expected_buckets"),
    [
        ("todos", {"owner": "u1", "done": False}, ["mine"]),
        ("todos", {"owner": "u1", "done": True}, []),  # filters are ANDed
        ("todos", {"owner": "u2", "done": False}, []),
        ("todos", {"owner": "u1", "done": False, "team": "t1"}, ["mine", "team"]),
        ("notes", {"owner": "u1", "done": False}, []),  # "mine" covers only todos
        ("notes", {"team": "t2"}, ["team"]),
        ("other", {"team": "t2"}, []),
        ("other", {"public": True}, ["public"]),  # no tables = every table
        ("notes", {"public": True, "team": "t1"}, ["team", "public"]),
    ],
)
def test_buckets_are_ored_and_filters_anded(
    table: str, row: dict[str, Any], expected_buckets: list[str]
) -> None:
    assert buckets_for(RULES, CLAIMS, table, row) == expected_buckets
    assert visible(RULES, CLAIMS, table, row) is bool(expected_buckets)


def test_absent_row_is_never_visible_and_in_no_bucket() -> None:
    assert not visible(RULES, CLAIMS, "todos", None)
    assert not visible(None, CLAIMS, "todos", None)
    assert buckets_for(RULES, CLAIMS, "todos", None) == []


def test_no_rules_means_everything() -> None:
    assert visible(None, {}, "anything", {"x": 1})
    assert visible(None, {}, "anything", {})
    assert tables_for(None, CLAIMS) is None


def test_bucket_without_filters_matches_every_row_of_its_tables() -> None:
    rules = parse_rules({"version": 1, "buckets": [{"name": "all", "tables": ["todos"]}]})
    assert visible(rules, {}, "todos", {})
    assert not visible(rules, {}, "notes", {})
    assert tables_for(rules, {}) == {"todos"}


def test_empty_bucket_list_shows_nothing() -> None:
    rules = parse_rules({"version": 1, "buckets": []})
    assert not visible(rules, CLAIMS, "todos", {"x": 1})
    assert tables_for(rules, CLAIMS) == set()


def test_tables_for() -> None:
    only = parse_rules(
        {
            "version": 1,
            "buckets": [
                {"name": "a", "tables": ["todos"]},
                {"name": "b", "tables": ["notes", "todos"]},
            ],
        }
    )
    assert tables_for(only, CLAIMS) == {"todos", "notes"}
    assert tables_for(RULES, CLAIMS) is None  # the "public" bucket has tables: []


def test_rules_round_trip_through_wire_form() -> None:
    assert parse_rules(rules_to_wire(RULES)) == RULES


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"version": 2, "buckets": []}, "version"),
        ({"buckets": []}, "version"),
        ({"version": 1}, "buckets"),
        ("not a document", "object"),
        (
            {
                "version": 1,
                "buckets": [
                    {"name": "b", "filters": [{"column": "c", "op": "like", "value": "x"}]}
                ],
            },
            "buckets[0].filters[0].op",
        ),
        (
            {"version": 1, "buckets": [{"name": "b", "tables": ["ok", "t; drop table x"]}]},
            "buckets[0].tables[1]",
        ),
        (
            {
                "version": 1,
                "buckets": [
                    {"name": "b", "filters": [{"column": "1bad", "op": "eq", "value": "x"}]}
                ],
            },
            "buckets[0].filters[0].column",
        ),
        ({"version": 1, "buckets": [{"name": "b", "colour": "red"}]}, "colour"),
        ({"version": 1, "extra": True, "buckets": []}, "extra"),
        (
            {
                "version": 1,
                "buckets": [
                    {"name": "b", "filters": [{"column": "c", "op": "eq", "value": "x", "x": 1}]}
                ],
            },
            "buckets[0].filters[0]",
        ),
        ({"version": 1, "buckets": [{"tables": ["t"]}]}, "name"),
        ({"version": 1, "buckets": [{"name": ""}]}, "buckets[0].name"),
        (
            {"version": 1, "buckets": [{"name": "dup"}, {"name": "dup"}]},
            "duplicate bucket name 'dup'",
        ),
        (
            {
                "version": 1,
                "buckets": [{"name": "b", "filters": [{"column": "c", "op": "eq", "value": 5}]}],
            },
            "buckets[0].filters[0].value",
        ),
        (
            {"version": 1, "buckets": [{"name": "b", "filters": [{"column": "c", "op": "eq"}]}]},
            "value",
        ),
    ],
)
def test_invalid_documents_are_rejected_naming_the_problem(doc: object, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_rules(doc)
    assert needle in info.value.message
    assert info.value.status == 400


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.5, "1", "a", "b", "x\x00y"]),
    st.lists(st.sampled_from(["a", 1]), max_size=2),
)
_FILTERS = st.builds(
    lambda column, op, value: {"column": column, "op": op, "value": value},
    st.sampled_from(["owner", "team", "n"]),
    st.sampled_from(["eq", "in", "neq", "gt", "lte"]),
    st.one_of(
        st.sampled_from(["a", "b", "1", "null", "true", "jwt:sub", "jwt:teams", "jwt:none"]),
        st.lists(st.sampled_from(["a", "b", "1"]), max_size=2),
    ),
)


@given(
    buckets=st.lists(
        st.fixed_dictionaries(
            {
                "tables": st.sampled_from([[], ["todos"], ["notes"]]),
                "filters": st.lists(_FILTERS, max_size=3),
            }
        ),
        max_size=3,
    ),
    row=st.dictionaries(st.sampled_from(["owner", "team", "n"]), _VALUES, max_size=3),
    claims=st.fixed_dictionaries(
        {"sub": st.sampled_from(["a", "b"])},
        optional={"teams": st.lists(st.sampled_from(["a", "b", "1"]), max_size=2)},
    ),
)
def test_index_lookups_find_every_visible_row(
    buckets: list[dict[str, Any]], row: dict[str, Any], claims: dict[str, Any]
) -> None:
    rules = parse_rules(
        {"version": 1, "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)]}
    )
    plan = lookups(rules, claims)
    if plan is None:  # some bucket has no equality filter: a full scan is the only way
        assert any(not [f for f in b.filters if f.op in ("eq", "in")] for b in rules.buckets)
        return
    entries = index_entries(rules, row)
    found = any((col, key) in entries for col, keys in plan for key in keys)
    if visible(rules, claims, "todos", row):
        assert found


def _mine(tables: list[str], column: str = "owner") -> SyncRules:
    return parse_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "mine",
                    "tables": tables,
                    "filters": [{"column": column, "op": "eq", "value": "jwt:sub"}],
                }
            ],
        }
    )


SCHEMAS = {
    name: parse_schema({"table": name, "columns": [{"name": c, "type": "string"} for c in cols]})
    for name, cols in {"todos": ["title", "owner"], "notes": ["body", "owner"]}.items()
}


@pytest.mark.parametrize(
    ("rules", "needles"),
    [
        (_mine(["todo"]), ["bucket 'mine'", "table 'todo'", "no registered schema",
                           "did you mean 'todos'?"]),
        (_mine(["todos"], "ownr"), ["bucket 'mine'", "table 'todos'", "column 'ownr'",
                                    "did you mean 'owner'?"]),
        (_mine(["todos", "notes"], "title"), ["table 'notes'", "column 'title'"]),
        (_mine([], "xyz"), ["bucket 'mine' (every table)", "column 'xyz'",
                            "known columns: body, owner, title"]),
    ],
    ids=["table", "column", "column-of-one-table", "every-table"],
)
def test_rules_naming_what_no_schema_has_are_refused(rules: SyncRules, needles: list[str]) -> None:
    with pytest.raises(SchemaError) as info:
        check_rules(rules, SCHEMAS)
    for needle in needles:
        assert needle in info.value.message, info.value.message


def test_rules_over_registered_names_and_schemaless_gateways_pass() -> None:
    check_rules(_mine(["todos", "notes"]), SCHEMAS)
    check_rules(_mine([], "owner"), SCHEMAS)
    check_rules(None, SCHEMAS)
    check_rules(_mine(["anything"], "at_all"), {})  # no schema: nothing to check against


def test_tables_a_connector_fills_may_be_named_before_their_schema_registers() -> None:
    """A connector's table registers its schema as the connector polls (a CloudWatch ``parse:
    json`` table grows with the fields it finds): rules may name it, and its columns, at once."""
    rules = _mine(["todos", "logs"], "owner")
    with pytest.raises(SchemaError, match="table 'logs'"):
        check_rules(rules, SCHEMAS)
    check_rules(rules, SCHEMAS, pending={"logs"})
    logs = parse_schema({"table": "logs", "columns": [{"name": "message", "type": "string"}]})
    check_rules(rules, {**SCHEMAS, "logs": logs}, pending={"logs"})  # its columns come later
    with pytest.raises(SchemaError, match="column 'ownr'"):  # declared tables are still checked
        check_rules(_mine(["todos", "logs"], "ownr"), SCHEMAS, pending={"logs"})


def test_connector_tables_name_what_each_kind_fills() -> None:
    specs = parse_connectors({
        "j": {"kind": "jira", "gateway": "gw1", "url": "https://x.atlassian.net", "email": "a@b.c",
              "token": "t", "jql": "project = X", "comments": False},
        "cw": {"kind": "cloudwatch_logs", "gateway": "gw2", "log_groups": ["/svc"],
               "table": "events"},
    }, "lakesync.yaml")
    assert tables_by_gateway(specs) == {"gw1": {"jira_issues", "jira_projects"},
                                        "gw2": {"events"}}


@given(
    buckets=st.lists(
        st.fixed_dictionaries(
            {
                "tables": st.sampled_from([[], ["todos"], ["notes"], ["todos", "notes"]]),
                "filters": st.lists(_FILTERS, max_size=3),
            }
        ),
        max_size=3,
    ),
    rows=st.lists(
        st.tuples(
            st.sampled_from(["todos", "notes"]),
            st.none() | st.dictionaries(st.sampled_from(["owner", "team", "n"]), _VALUES),
        ),
        max_size=8,
    ),
    claims=st.fixed_dictionaries(
        {"sub": st.sampled_from(["a", "b", "1"])},
        optional={
            "teams": st.lists(st.sampled_from(["a", "b", "1"]), max_size=2),
            "none": st.sampled_from(["null", "true"]),
        },
    ),
    ruleless=st.booleans(),
)
def test_visible_among_answers_as_visible_row_by_row(
    buckets: list[dict[str, Any]],
    rows: list[tuple[str, dict[str, Any] | None]],
    claims: dict[str, Any],
    ruleless: bool,
) -> None:
    # A checkpoint chunk is filtered column by column; each row must get visible()'s answer.
    rules = None if ruleless else parse_rules(
        {"version": 1, "buckets": [{"name": f"b{i}", **b} for i, b in enumerate(buckets)]}
    )
    expected = [visible(rules, claims, table, row) for table, row in rows]
    assert visible_among(rules, claims, rows) == expected
