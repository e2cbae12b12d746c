"""Canonical JSON and deltaIds (docs/protocol.md §3), checked against a real JavaScript oracle.

NaN and ±Infinity cannot travel to node as JSON, so those cases sit in a fixed table of what
fast-json-stable-stringify prints; every JSON-representable case of the table is also re-checked
against node, and a Hypothesis property compares random JSON values in one node process.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from js_oracle import run_oracle

from lakesync.canonical import canonical_json, js_number_str
from lakesync.delta import delta_id

VECTOR_BASE: dict[str, Any] = {
    "client_id": "client-1",
    "hlc": 1_000_000,
    "table": "users",
    "row_id": "row-1",
}
SPEC_DELTA_IDS: list[tuple[list[dict[str, Any]], str]] = [
    (
        [
            {"column": "name", "value": "Alice"},
            {"column": "age", "value": 30},
            {"column": "active", "value": True},
        ],
        "ea49110ec03d9efc670f11ed6bab11d07d6de5ed11e6be1da8812d3fdf4da712",
    ),
    (
        [{"column": "age", "value": 31}],
        "fc92f1a830e24be5711a0d093f3af271daa84d32dc05c4d47649533a11dd6e7f",
    ),
    ([], "c932f0be98156483d734ecd937f34a5f062e436c54289872bf9d9da84960d164"),
]

# (Python value, what JavaScript's fast-json-stable-stringify prints for the same JSON value)
CASES: list[tuple[Any, str]] = [
    (1.0, "1"),
    (-2.0, "-2"),
    (1e16, "10000000000000000"),
    (0.1, "0.1"),
    (0.1 + 0.2, "0.30000000000000004"),
    (1e21, "1e+21"),
    (1e20, "100000000000000000000"),
    (1.5e21, "1.5e+21"),
    (123456789012345680000.0, "123456789012345680000"),
    (1e-6, "0.000001"),
    (1e-7, "1e-7"),
    (1.5e-7, "1.5e-7"),
    (-1e-7, "-1e-7"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (-0.0, "0"),
    (0, "0"),
    (2**53, "9007199254740992"),
    (2**53 + 1, "9007199254740992"),
    (2**64 - 1, "18446744073709552000"),
    (-(2**63), "-9223372036854776000"),
    (10**400, "null"),
    (True, "true"),
    (None, "null"),
    (
        {"b": 1, "a": {"d": [3, {"z": 0, "y": 1.0}], "c": None}},
        '{"a":{"c":null,"d":[3,{"y":1,"z":0}]},"b":1}',
    ),
    ([], "[]"),
    ({}, "{}"),
    ("", '""'),
    ([1, "a", [None, False]], '[1,"a",[null,false]]'),
    ("héllo wörld ✓ 😀", '"héllo wörld ✓ 😀"'),
    # UTF-16 order: U+1F600 is the surrogate pair D83D DE00, which sorts before U+E000.
    ({"\ue000": 1, "😀": 2}, '{"😀":2,"\ue000":1}'),
    ({"a": 1, "B": 2, "_": 3, "10": 4, "9": 5, "é": 6}, '{"10":4,"9":5,"B":2,"_":3,"a":1,"é":6}'),
    (
        '\x00\x01\x1f\b\f\n\r\t"\\/\x7f\u2028',
        '"\\u0000\\u0001\\u001f\\b\\f\\n\\r\\t\\"\\\\/\x7f\u2028"',
    ),
    ("\ud800x", '"\\ud800x"'),
    ({"k\n": "v"}, '{"k\\n":"v"}'),
]
NON_JSON_CASES: list[tuple[Any, str]] = [
    (math.nan, "null"),
    (math.inf, "null"),
    (-math.inf, "null"),
    ([math.nan, {"x": -math.inf}], '[null,{"x":null}]'),
]


@pytest.mark.parametrize(("columns", "expected"), SPEC_DELTA_IDS)
def test_spec_delta_ids(columns: list[dict[str, Any]], expected: str) -> None:
    assert delta_id(columns=columns, **VECTOR_BASE) == expected


def test_delta_id_accepts_hlc_as_decimal_string() -> None:
    cols, expected = SPEC_DELTA_IDS[1]
    assert delta_id("client-1", "1000000", "users", "row-1", cols) == expected


def test_delta_id_depends_on_column_order() -> None:
    cols, expected = SPEC_DELTA_IDS[0]
    assert delta_id(columns=list(reversed(cols)), **VECTOR_BASE) != expected


@pytest.mark.parametrize(("value", "expected"), CASES + NON_JSON_CASES)
def test_canonical_table(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (1.0, "1"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (-0.0, "0"),
        (math.nan, "null"),
        (255, "255"),
        (0.000001234, "0.000001234"),
        (1.234e-7, "1.234e-7"),
        (12345.678, "12345.678"),
    ],
)
def test_js_number_str(x: float, expected: str) -> None:
    assert js_number_str(x) == expected


def test_canonical_rejects_non_json_values() -> None:
    with pytest.raises(TypeError):
        canonical_json(b"bytes")
    with pytest.raises(TypeError):
        canonical_json({"a": object()})


def test_table_and_spec_vectors_agree_with_javascript() -> None:
    docs: list[dict[str, Any]] = [{"value": v} for v, _ in CASES]
    docs += [
        {
            "delta": {
                "clientId": "client-1",
                "hlc": "1000000",
                "table": "users",
                "rowId": "row-1",
                "columns": cols,
            }
        }
        for cols, _ in SPEC_DELTA_IDS
    ]
    results = run_oracle(docs)
    for (value, expected), (js, _) in zip(CASES, results, strict=False):
        assert js == expected, f"table entry for {value!r} disagrees with JavaScript"
    for (_, expected_id), (_, js_id) in zip(SPEC_DELTA_IDS, results[len(CASES) :], strict=True):
        assert js_id == expected_id


_keys = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        ["a", "B", "_", "10", "9", "é", "\ue000", "😀", "\uffff", "\U0001d538", "__proto__"]
    ),
)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
json_values = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=5)
    ),
    max_leaves=12,
)
_columns = st.lists(
    st.fixed_dictionaries(
        {"column": st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), "value": json_values}
    ),
    max_size=4,
)
_identity = {
    "clientId": st.text(min_size=1, max_size=10),
    "hlc": st.integers(0, 2**64 - 1).map(str),
    "table": st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True),
    "rowId": st.text(min_size=1, max_size=10),
}
_deltas = st.fixed_dictionaries(_identity | {"columns": _columns})


def _collect(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """Draw ``n`` Hypothesis examples so the oracle can check them all in one node process."""
    drawn: list[Any] = []

    @settings(max_examples=n, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(example: Any) -> None:
        drawn.append(example)

    draw()
    return drawn


def test_random_json_values_match_javascript() -> None:
    values = _collect(json_values, 400)
    results = run_oracle([{"value": v} for v in values])
    bad = [(v, js) for v, (js, _) in zip(values, results, strict=True) if canonical_json(v) != js]
    bad.sort(key=lambda pair: len(repr(pair[0])))
    assert not bad, f"{len(bad)} mismatches; smallest: {bad[0][0]!r}: JS {bad[0][1]!r}"


def test_random_delta_ids_match_javascript() -> None:
    deltas = _collect(_deltas, 200)
    results = run_oracle([{"delta": d} for d in deltas])
    for d, (_, js_id) in zip(deltas, results, strict=True):
        ours = delta_id(d["clientId"], d["hlc"], d["table"], d["rowId"], d["columns"])
        assert ours == js_id, f"deltaId of {d!r} differs from JavaScript"


_plain_columns = st.lists(
    st.fixed_dictionaries(
        {
            "column": st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
            # What msgspec writes as canonical JSON (the fast path of a deltaId), including the
            # edges: lone surrogates, escaped controls, the safe-integer bounds.
            "value": st.one_of(
                st.none(),
                st.booleans(),
                st.integers(-(2**53), 2**53),
                st.sampled_from([2**53, -(2**53), 2**53 + 1, "\ud800", "a\u2028\x7f\x1f\"\\"]),
                st.text(),
            ),
        }
    ),
    max_size=4,
)


def test_random_delta_ids_of_plain_cells_match_javascript() -> None:
    deltas = _collect(st.fixed_dictionaries(_identity | {"columns": _plain_columns}), 200)
    results = run_oracle([{"delta": d} for d in deltas])
    for d, (_, js_id) in zip(deltas, results, strict=True):
        ours = delta_id(d["clientId"], d["hlc"], d["table"], d["rowId"], d["columns"])
        assert ours == js_id, f"deltaId of {d!r} differs from JavaScript"


@given(st.one_of(_columns, _plain_columns), st.text(min_size=1), st.text(min_size=1))
@settings(max_examples=300, database=None)
def test_delta_id_is_the_hash_of_the_canonical_text_for_any_cells(
    cols: list[dict[str, Any]], client_id: str, row_id: str
) -> None:
    # The msgspec path (plain cells) and the text path agree with canonical_json of the body.
    body = {"table": "t", "rowId": row_id, "hlc": "7", "columns": cols, "clientId": client_id}
    expected = hashlib.sha256(canonical_json(body).encode("utf-8", "surrogatepass")).hexdigest()
    assert delta_id(client_id, 7, "t", row_id, cols) == expected


def test_delta_id_is_sha256_of_utf8_canonical_json() -> None:
    cols = [{"column": "name", "value": "Zoë 😀"}]
    body = {"table": "t", "rowId": "r", "hlc": "5", "columns": cols, "clientId": "c"}
    expected = hashlib.sha256(canonical_json(body).encode()).hexdigest()
    assert delta_id("c", 5, "t", "r", cols) == expected
