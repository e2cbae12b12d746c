"""Hypothesis state machine over a real gateway (each store) under relational sync rules: "the
todos of the lists I am a member of".

Random memberships (added, moved, removed, by the admin and by clients for themselves), todos
(created, moved between lists, edited, deleted) by several clients and the admin, single pushes
and two-delta batches, partial and full pulls by clients of both kinds, reinstalls. After every
full pull a replica equals what an independent model computes from the accepted deltas: the
todos whose list holds a membership of the client, and the client's own memberships; a write
the model refuses (USING / WITH CHECK, judged one delta at a time) must be refused, and one it
allows accepted.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from lakesync.delta import RowDelta
from lakesync.merge import merge_state
from tests.api.helpers import MEMBERS_RULES, Gateway, Replica, WholeRowReplica, auth, token

CLIENTS = ["alice", "bob", "carol"]
LISTS = ["l1", "l2", "l3"]
TODOS = ["t0", "t1", "t2", "t3"]
MEMBERSHIPS = ["m0", "m1", "m2", "m3"]
Rows = dict[tuple[str, str], dict[str, Any]]


def model_view(client: str, rows: Rows) -> Rows:
    """The model: a client sees its memberships and the todos of the lists they name."""
    lists = {
        v["list_id"]
        for (t, _), v in rows.items()
        if t == "list_members" and v.get("user_id") == client and v.get("list_id") is not None
    }
    return {
        (t, r): v
        for (t, r), v in rows.items()
        if (t == "todos" and v.get("list_id") in lists)
        or (t == "list_members" and v.get("user_id") == client)
    }


def model_allows(client: str, accepted: list[RowDelta], batch: list[RowDelta]) -> bool:
    """Row-level security as the model sees it: each delta, after the earlier ones, must find
    its row in the writer's view or absent (USING) and leave it there or deleted (WITH CHECK)."""
    done = list(accepted)
    for d in batch:
        key = (d.table, d.row_id)
        before = merge_state(done)
        if key in before and key not in model_view(client, before):
            return False
        done.append(d)
        after = merge_state(done)
        if key in after and key not in model_view(client, after):
            return False
    return True


class RelationsMachine(RuleBasedStateMachine):
    gateway: Gateway

    def __init__(self) -> None:
        super().__init__()
        self.gw = "gw" + uuid.uuid4().hex[:10]
        self.accepted: list[RowDelta] = []
        self.replicas = {c: Replica() for c in CLIENTS}
        self.whole = {c: WholeRowReplica() for c in CLIENTS}
        self.wall = time.time_ns() // 1_000_000
        self.tick = 0

    @initialize()
    def start(self) -> None:
        self.wall = time.time_ns() // 1_000_000
        r = self.gateway.http.post(
            f"/v1/admin/sync-rules/{self.gw}", json=MEMBERS_RULES,
            headers=auth(token("root", self.gw, "admin")),
        )
        assert r.status_code == 200, r.text

    def token_of(self, client: str) -> str:
        return token(client, self.gw, "admin" if client == "root" else "client")

    def hlc(self, age_ms: int) -> int:
        self.tick += 1
        return ((self.wall - age_ms) << 16) | (self.tick & 0xFFFF)

    def send(self, client: str, batch: list[RowDelta]) -> None:
        allowed = client == "root" or model_allows(client, self.accepted, batch)
        r = self.gateway.push(self.token_of(client), client, batch, gw=self.gw)
        if not allowed:
            assert r.status_code == 403, (r.status_code, r.text)
            return
        assert r.status_code == 200, r.text
        self.accepted.extend(batch)
        if client in self.replicas:  # a client applies its own writes locally
            for d in batch:
                self.replicas[client].state.apply(d)
                self.whole[client].write(d)

    _member = st.tuples(
        st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
        st.sampled_from(MEMBERSHIPS),
        st.fixed_dictionaries(
            {}, optional={"user_id": st.sampled_from(CLIENTS), "list_id": st.sampled_from(LISTS)}
        ),
    )
    _todo = st.tuples(
        st.sampled_from(["INSERT", "UPDATE", "UPDATE", "DELETE"]),
        st.sampled_from(TODOS),
        st.fixed_dictionaries(
            {},
            optional={"list_id": st.sampled_from([*LISTS, None]),
                      "title": st.sampled_from(["a", "b"])},
        ),
    )

    def make(self, client: str, table: str, what: tuple[str, str, dict[str, Any]],
             age_ms: int) -> RowDelta:
        op, row, cols = what
        return RowDelta.create(op, table, row, client, {} if op == "DELETE" else cols,  # type: ignore[arg-type]
                               self.hlc(age_ms))

    @rule(client=st.sampled_from([*CLIENTS, "root", "root"]), what=_member,
          age_ms=st.integers(0, 2000))
    def membership(self, client: str, what: tuple[str, str, dict[str, Any]], age_ms: int) -> None:
        self.send(client, [self.make(client, "list_members", what, age_ms)])

    @rule(client=st.sampled_from([*CLIENTS, "root"]), what=_todo, age_ms=st.integers(0, 2000))
    def todo(self, client: str, what: tuple[str, str, dict[str, Any]], age_ms: int) -> None:
        self.send(client, [self.make(client, "todos", what, age_ms)])

    @rule(client=st.sampled_from(CLIENTS), first=_member, then=_todo)
    def batch(self, client: str, first: tuple[str, str, dict[str, Any]],
              then: tuple[str, str, dict[str, Any]]) -> None:
        """A membership and a todo in one push: the todo is judged after the membership."""
        self.send(client, [self.make(client, "list_members", first, 0),
                           self.make(client, "todos", then, 0)])

    @rule(client=st.sampled_from(CLIENTS), limit=st.integers(1, 3))
    def partial_pull(self, client: str, limit: int) -> None:
        rep = self.replicas[client]
        r = self.gateway.pull_page(self.token_of(client), client, rep.cursor, limit, gw=self.gw)
        assert r.status_code == 200, r.text
        body = r.json()
        rep.apply(body["deltas"])
        rep.cursor = int(body["serverHlc"])

    @rule(client=st.sampled_from(CLIENTS), limit=st.sampled_from([2, 100]))
    def full_pull(self, client: str, limit: int) -> None:
        rep = self.replicas[client]
        self.gateway.sync(self.token_of(client), client, rep, limit=limit, gw=self.gw)
        assert rep.rows() == model_view(client, merge_state(self.accepted))

    @rule(client=st.sampled_from(CLIENTS), limit=st.sampled_from([2, 100]))
    def whole_row_pull(self, client: str, limit: int) -> None:
        rep = self.whole[client]
        self.gateway.sync(self.token_of(client), client, rep, limit=limit, gw=self.gw)
        want = {
            k: {c: v for c, v in row.items() if v is not None}
            for k, row in model_view(client, merge_state(self.accepted)).items()
        }
        assert rep.rows() == want

    @rule(client=st.sampled_from(CLIENTS))
    def reinstall(self, client: str) -> None:
        """A fresh replica of the same client starts from since=0."""
        self.replicas[client] = Replica()
        self.whole[client] = WholeRowReplica()


@pytest.mark.slow
def test_replicas_equal_the_models_view_through_relations(shared_gateway: Gateway) -> None:
    RelationsMachine.gateway = shared_gateway
    run_state_machine_as_test(
        RelationsMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
