"""Hypothesis state machine over real gateways: row-level write access holds whatever the order.

Clients push batches (creations, edits, hand-overs, deletes, late writes) one at a time or
several at once, through one gateway (SQLite) or two gateway apps sharing one PostgreSQL store
(as two processes); an admin changes the rules, some of whose buckets allow hand-over. After
every step the machine reads the log in ingest order and replays it with an independent model
of the rules: every accepted client write found its row in the writer's view or absent, and
left it in the view or absent, unless a bucket that showed it the row allows hand-over. A push
made alone must be answered exactly as the model says (200 or 403); pushes made at once are
each 200 or 403, and the log holds exactly the accepted ones.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.merge import RowState, join_delta
from lakesync.rules import SyncRules, parse_rules, visible
from tests.api.helpers import Gateway, auth, make_settings, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres

TEAMS = {"alice": "red", "bob": "blue", "carol": "red"}
CLIENTS = list(TEAMS)
ROWS = ["r0", "r1", "r2"]


def _owner(handover: bool) -> dict[str, Any]:
    return {
        "name": "mine",
        "tables": ["todos"],
        "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        "handover": handover,
    }


RULESETS: list[dict[str, Any]] = [
    {"version": 1, "buckets": [_owner(False)]},
    {"version": 1, "buckets": [_owner(True)]},
    {
        "version": 1,
        "buckets": [
            _owner(True),
            {"name": "team", "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]},
        ],
    },
    {
        "version": 1,
        "buckets": [
            _owner(False),
            {
                "name": "urgent",
                "tables": ["todos"],
                "filters": [
                    {"column": "prio", "op": "gte", "value": "3"},
                    {"column": "owner", "op": "neq", "value": "carol"},
                ],
                "handover": True,
            },
        ],
    },
    {"version": 1, "buckets": [{"name": "notes", "tables": ["notes"]}]},
]


def claims_of(client: str, gw: str) -> dict[str, Any]:
    return {"sub": client, "gw": gw, "role": "client", "team": TEAMS[client]}


def allowed(
    rules: SyncRules | None,
    claims: dict[str, Any],
    table: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> bool:
    """The model: PostgreSQL-style USING and WITH CHECK over merged states, hand-over relaxing
    WITH CHECK for rows a hand-over bucket showed the writer. Written from the README, not from
    the gateway's code."""
    if rules is None:
        return True
    if not any(not b.tables or table in b.tables for b in rules.buckets):
        return False  # no bucket covers the table
    if before is not None and not visible(rules, claims, table, before):
        return False  # USING
    if after is None or visible(rules, claims, table, after):
        return True  # WITH CHECK
    return before is not None and any(
        b.handover is True and visible(SyncRules(1, [b]), claims, table, before)
        for b in rules.buckets
    )


@dataclass
class Setup:
    gateways: list[Gateway]
    store: HotLog


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    path: Path = tmp_path_factory.mktemp("write-sm")
    if request.param == "sqlite":
        store = SqliteHotLog(path / "hot.sqlite3", HLC())
        try:
            with TestClient(create_app(make_settings(path), store=store)) as client:
                yield Setup([Gateway(client)], store)
        finally:
            store.close()
        return
    require_postgres()
    schema = fresh_pg_schema()
    stores = [PostgresHotLog(PG_DSN, HLC(), schema=schema) for _ in range(2)]
    try:
        with (
            TestClient(create_app(make_settings(path / "a"), store=stores[0])) as a,
            TestClient(create_app(make_settings(path / "b"), store=stores[1])) as b,
        ):
            yield Setup([Gateway(a), Gateway(b)], stores[0])
    finally:
        for s in stores:
            s.close()
        drop_pg_schema(schema)


WRITERS = st.sampled_from([*CLIENTS, *CLIENTS, "root"])


@st.composite
def writes(draw: st.DrawFn, client: str, row: str | None = None) -> RowDelta:
    op = draw(st.sampled_from(["INSERT", "UPDATE", "UPDATE", "DELETE"]))
    cols: dict[str, Any] = {}
    if op != "DELETE":
        cols = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "owner": st.sampled_from(CLIENTS),
                    "team": st.sampled_from(["red", "blue"]),
                    "prio": st.integers(1, 4),
                    "title": st.sampled_from(["a", "b"]),
                },
            )
        )
    table = "todos" if row is not None else draw(st.sampled_from(["todos", "todos", "notes"]))
    # Late writes (an HLC up to 2 s old) lose cells to newer ones: the check is on merged states.
    hlc = (time.time_ns() // 1_000_000 - draw(st.integers(0, 2000))) << 16
    row = draw(st.sampled_from(ROWS)) if row is None else row
    return RowDelta.create(op, table, row, client, cols, hlc)  # type: ignore[arg-type]


@st.composite
def pushes(draw: st.DrawFn, row: str | None = None) -> tuple[str, int, list[RowDelta]]:
    client = draw(WRITERS)
    size = 1 if row is not None else draw(st.integers(1, 3))
    batch = draw(st.lists(writes(client, row), min_size=size, max_size=size))
    return client, draw(st.integers(0, 1)), batch


@st.composite
def contended(draw: st.DrawFn) -> list[tuple[str, int, list[RowDelta]]]:
    """Pushes at once on one row: an owner change racing the old owner's edit, and so on."""
    row = draw(st.sampled_from(ROWS))
    return draw(st.lists(pushes(row), min_size=2, max_size=4))


class WriteAccessMachine(RuleBasedStateMachine):
    setup: Setup

    def __init__(self) -> None:
        super().__init__()
        self.gw = "gw" + uuid.uuid4().hex[:10]
        self.rules: SyncRules | None = None
        self.states: dict[tuple[str, str], RowState] = {}
        self.stored: set[str] = set()
        self.position = 0

    def _gateway(self, index: int) -> Gateway:
        return self.setup.gateways[index % len(self.setup.gateways)]

    def _push(self, client: str, index: int, batch: list[RowDelta]) -> int:
        role = "admin" if client == "root" else "client"
        tok = token(client, self.gw, role, **({} if client == "root" else {"team": TEAMS[client]}))
        r = self._gateway(index).push(tok, client, batch, gw=self.gw)
        assert r.status_code in (200, 403), r.text
        if r.status_code == 403:
            assert r.json()["code"] == "FORBIDDEN", r.text
        return int(r.status_code)

    def _predict(self, client: str, batch: list[RowDelta]) -> int:
        """What the model answers to a push made alone: each new delta judged in turn."""
        if client == "root":
            return 200
        states = {k: RowState(dict(s.cells), s.write, s.tombstone) for k, s in self.states.items()}
        seen = set(self.stored)
        for d in batch:
            if d.delta_id in seen:
                continue
            seen.add(d.delta_id)
            state = states.setdefault((d.table, d.row_id), RowState())
            before = state.visible()
            join_delta(state, d)
            if not allowed(
                self.rules, claims_of(client, self.gw), d.table, before, state.visible()
            ):
                return 403
        return 200

    def _replay(self) -> set[str]:
        """Apply the log entries since the last step in ingest order, checking each accepted
        client write against the model; the deltaIds they stored."""
        new = self.setup.store.read_log(self.position, 100_000, self.gw)
        ids: set[str] = set()
        for ingest, _, d in new:
            self.position = ingest
            ids.add(d.delta_id)
            self.stored.add(d.delta_id)
            state = self.states.setdefault((d.table, d.row_id), RowState())
            before = state.visible()
            join_delta(state, d)
            if d.client_id == "root":
                continue
            claims = claims_of(d.client_id, self.gw)
            assert allowed(self.rules, claims, d.table, before, state.visible()), (
                f"accepted past the check: {d} on {before} under {self.rules}"
            )
        return ids

    @rule(push=pushes())
    def push_alone(self, push: tuple[str, int, list[RowDelta]]) -> None:
        client, index, batch = push
        expected = self._predict(client, batch)
        known = {d.delta_id for d in batch} & self.stored
        status = self._push(client, index, batch)
        stored = self._replay()
        assert status == expected
        want = {d.delta_id for d in batch} - known if status == 200 else set()
        assert stored == want

    @rule(many=st.one_of(contended(), st.lists(pushes(), min_size=2, max_size=4)))
    def push_at_once(self, many: list[tuple[str, int, list[RowDelta]]]) -> None:
        known = set(self.stored)
        statuses: list[int] = [0] * len(many)
        start = threading.Barrier(len(many))

        def run(i: int) -> None:
            start.wait(timeout=30)
            statuses[i] = self._push(*many[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(many))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stored = self._replay()
        assert all(s in (200, 403) for s in statuses), statuses
        accepted = {
            d.delta_id for (_, _, b), s in zip(many, statuses, strict=True) if s == 200 for d in b
        }
        assert stored == (accepted - known)

    @rule(index=st.integers(0, len(RULESETS) - 1), via=st.integers(0, 1))
    def change_rules(self, index: int, via: int) -> None:
        doc = RULESETS[index]
        r = self._gateway(via).http.post(
            f"/v1/admin/sync-rules/{self.gw}",
            json=doc,
            headers=auth(token("root", self.gw, "admin")),
        )
        assert r.status_code == 200, r.text
        self.rules = parse_rules(doc)


@pytest.mark.slow
def test_no_accepted_write_leaves_its_row_outside_the_writers_view(setup: Setup) -> None:
    WriteAccessMachine.setup = setup
    run_state_machine_as_test(
        WriteAccessMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
