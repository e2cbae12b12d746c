"""Row-level write access (``lakesync.rules.write_refusal``): USING, WITH CHECK and hand-over,
judged on merged states, a batch as the same deltas one at a time."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lakesync.delta import RowDelta
from lakesync.merge import RowState, join_delta
from lakesync.rules import SyncRules, parse_rules, rules_to_wire, visible, write_refusal

ALICE: dict[str, Any] = {"sub": "alice", "role": "client"}


def owner_rules(handover: bool | None = None) -> SyncRules:
    bucket: dict[str, Any] = {
        "name": "mine",
        "tables": ["todos"],
        "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
    }
    if handover is not None:
        bucket["handover"] = handover
    return parse_rules({"version": 1, "buckets": [bucket]})


OWNER = owner_rules()
HANDOVER = owner_rules(True)


def d(op: str, row: str, hlc: int, client: str = "alice", **cols: object) -> RowDelta:
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


def states(*deltas: RowDelta) -> dict[tuple[str, str], RowState]:
    out: dict[tuple[str, str], RowState] = {}
    for x in deltas:
        join_delta(out.setdefault((x.table, x.row_id), RowState()), x)
    return out


STORED = states(
    d("INSERT", "mine", 1, owner="alice", title="a"),
    d("INSERT", "theirs", 1, client="bob", owner="bob"),
    d("INSERT", "gone", 1, client="bob", owner="bob", title="secret"),
    d("DELETE", "gone", 2, client="bob"),
)


def refused(rules: SyncRules | None, *deltas: RowDelta) -> str | None:
    found = write_refusal(rules, ALICE, deltas, STORED)
    return None if found is None else f"{found[0]}: {found[1]}"


def test_using_a_row_must_be_in_the_view_before_the_write() -> None:
    assert refused(OWNER, d("UPDATE", "mine", 5, title="b")) is None
    assert refused(OWNER, d("DELETE", "mine", 5)) is None
    for write in (d("UPDATE", "theirs", 5, title="x"), d("DELETE", "theirs", 5)):
        reason = refused(OWNER, write)
        assert reason is not None
        assert reason.startswith("0: row 'theirs' of 'todos' is not in this client's view (USING)")
        assert "'mine'" in reason  # names the bucket
    # A deleted row does not exist: writing it is creating it, judged by WITH CHECK alone.
    assert refused(OWNER, d("INSERT", "gone", 5, owner="alice")) is None
    assert refused(OWNER, d("INSERT", "gone", 5, owner="bob")) is not None


def test_with_check_a_row_must_stay_in_the_view() -> None:
    """Bob's defect: a new row for someone else was accepted."""
    reason = refused(OWNER, d("INSERT", "new", 5, owner="bob"))
    assert reason is not None and "(WITH CHECK)" in reason and "'mine'" in reason
    assert refused(OWNER, d("INSERT", "new", 5)) is not None  # no owner: nobody's view
    assert refused(OWNER, d("INSERT", "new", 5, owner="alice")) is None
    giving = d("UPDATE", "mine", 5, owner="bob")
    reason = refused(OWNER, giving)
    assert reason is not None and "allows handover" in reason
    # A late write that loses to the row's newer owner cell leaves it in the view.
    assert refused(OWNER, d("UPDATE", "mine", 0, owner="bob")) is None


def test_handover_relaxes_with_check_for_rows_the_writer_holds() -> None:
    assert refused(HANDOVER, d("UPDATE", "mine", 5, owner="bob")) is None
    assert refused(owner_rules(False), d("UPDATE", "mine", 5, owner="bob")) is not None
    # Only what the writer holds: it cannot create a row for someone else, nor take one.
    assert refused(HANDOVER, d("INSERT", "new", 5, owner="bob")) is not None
    assert refused(HANDOVER, d("UPDATE", "theirs", 5, owner="alice")) is not None


def test_tables_no_bucket_covers_are_refused_and_no_rules_allow_everything() -> None:
    note = RowDelta.create("INSERT", "notes", "n", "alice", {"owner": "alice"}, 5)
    reason = refused(OWNER, note)
    assert reason == "0: no bucket of the sync rules covers table 'notes': no write access"
    assert refused(None, note, d("UPDATE", "theirs", 5, owner="x")) is None


def test_a_batch_is_judged_as_its_deltas_one_at_a_time() -> None:
    create, edit = d("INSERT", "new", 5, owner="alice"), d("UPDATE", "new", 6, title="t")
    assert refused(OWNER, create, edit) is None
    assert refused(OWNER, edit) is not None  # alone it creates a row with no owner
    assert refused(OWNER, create, d("UPDATE", "new", 6, owner="bob")) is not None
    assert (refused(OWNER, create, d("UPDATE", "theirs", 6, x=1)) or "").startswith("1: ")
    # Hand-over then a write to the row now outside the view: the second is refused.
    give, after = d("UPDATE", "mine", 5, owner="bob"), d("UPDATE", "mine", 6, title="z")
    assert (refused(HANDOVER, give, after) or "").startswith("1: ")
    assert STORED[("todos", "mine")].visible() == {"owner": "alice", "title": "a"}  # untouched


def test_handover_is_left_out_of_the_document_unless_set() -> None:
    assert "handover" not in rules_to_wire(OWNER)["buckets"][0]
    assert rules_to_wire(HANDOVER)["buckets"][0]["handover"] is True
    assert parse_rules(rules_to_wire(HANDOVER)) == HANDOVER


OWNERS = st.sampled_from(["alice", "bob", None])


@st.composite
def writes(draw: st.DrawFn) -> RowDelta:
    op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
    cols: dict[str, Any] = (
        {}
        if op == "DELETE"
        else draw(
            st.fixed_dictionaries({}, optional={"owner": OWNERS, "title": st.sampled_from("xy")})
        )
    )
    row = draw(st.sampled_from(["mine", "theirs", "gone", "new"]))
    return d(op, row, draw(st.integers(0, 8)), draw(st.sampled_from(["alice", "bob"])), **cols)


@given(st.lists(writes(), max_size=6), st.booleans())
def test_accepted_writes_never_leave_a_row_outside_the_view(
    batch: list[RowDelta], handover: bool
) -> None:
    """Accepted ⇔ each delta accepted after the ones before it; an accepted write finds its row
    in the view or absent, and leaves it in the view or absent (or, with hand-over, gives away
    a row it found in the view)."""
    rules = HANDOVER if handover else OWNER
    current = {k: RowState(dict(s.cells), s.write, s.tombstone) for k, s in STORED.items()}
    first_refused = None
    for i, x in enumerate(batch):
        key = (x.table, x.row_id)
        alone = write_refusal(rules, ALICE, [x], current)
        before = current.get(key, RowState()).visible()
        state = current.setdefault(key, RowState())
        join_delta(state, x)
        after = state.visible()
        sees_before = before is not None and visible(rules, ALICE, x.table, before)
        sees_after = after is not None and visible(rules, ALICE, x.table, after)
        allowed = (before is None or sees_before) and (
            after is None or sees_after or (handover and sees_before)
        )
        assert (alone is None) == allowed
        if not allowed and first_refused is None:
            first_refused = i
    found = write_refusal(rules, ALICE, batch, STORED)
    assert (None if found is None else found[0]) == first_refused
