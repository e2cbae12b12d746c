"""Hypothesis state machine: after a full pull, every replica equals filter(rules, claims, state).

Each client has two replicas: one that knows view evictions (the core merge, as the Python
client) and one that applies whole rows with last-writer-wins (the TypeScript client's
semantics), checked whenever the gateway has rules (without rules it passes the log through,
and whole-row last-writer-wins then drops a late delta's winning cells by design).

Random pushes (including late ones with old HLCs, deletes, ownership changes, admin writes),
rule changes, claim changes, partial and full pulls, all over HTTP on one app; each state
machine run uses its own gateway id (tenants are isolated).
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
from lakesync.rules import parse_rules, visible
from tests.api.helpers import Gateway, Replica, WholeRowReplica, auth, token

CLIENTS = ["alice", "bob", "carol"]
ROWS = ["r0", "r1", "r2", "r3"]
TEAMS = ["red", "blue"]
RULESETS: list[dict[str, Any]] = [
    {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            }
        ],
    },
    {
        "version": 1,
        "buckets": [
            {"name": "team", "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
        ],
    },
    {
        "version": 1,
        "buckets": [
            {"name": "mine", "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
            {
                "name": "urgent",
                "tables": ["todos"],
                "filters": [
                    {"column": "prio", "op": "gte", "value": "3"},
                    {"column": "owner", "op": "neq", "value": "carol"},
                ],
            },
        ],
    },
    {"version": 1, "buckets": [{"name": "all", "tables": []}]},
    {"version": 1, "buckets": [{"name": "notes", "tables": ["notes"]}]},
]


class RulesMachine(RuleBasedStateMachine):
    gateway: Gateway

    def __init__(self) -> None:
        super().__init__()
        self.gw = "gw" + uuid.uuid4().hex[:10]
        self.accepted: list[RowDelta] = []
        self.replicas = {c: Replica() for c in CLIENTS}
        self.whole = {c: WholeRowReplica() for c in CLIENTS}
        self.teams = dict.fromkeys(CLIENTS, "red")
        self.rules: dict[str, Any] | None = None
        self.wall = time.time_ns() // 1_000_000

    @initialize()
    def start(self) -> None:
        self.wall = time.time_ns() // 1_000_000

    def token_of(self, client: str) -> str:
        if client == "root":
            return token("root", self.gw, "admin")
        return token(client, self.gw, team=self.teams[client])

    @rule(
        client=st.sampled_from([*CLIENTS, "root"]),
        op=st.sampled_from(["INSERT", "UPDATE", "UPDATE", "DELETE"]),
        table=st.sampled_from(["todos", "todos", "notes"]),
        row=st.sampled_from(ROWS),
        cols=st.fixed_dictionaries(
            {},
            optional={
                "owner": st.sampled_from(CLIENTS),
                "team": st.sampled_from(TEAMS),
                "prio": st.integers(0, 5),
                "title": st.sampled_from(["a", "b", None]),
            },
        ),
        age_ms=st.integers(0, 3000),
        counter=st.integers(0, 3),
    )
    def push(
        self,
        client: str,
        op: str,
        table: str,
        row: str,
        cols: dict[str, Any],
        age_ms: int,
        counter: int,
    ) -> None:
        hlc = ((self.wall - age_ms) << 16) | counter
        d = RowDelta.create(op, table, row, client, {} if op == "DELETE" else cols, hlc)  # type: ignore[arg-type]
        r = self.gateway.push(self.token_of(client), client, [d], gw=self.gw)
        if r.status_code == 403:
            assert self.rules is not None and client != "root", r.text
            return
        assert r.status_code == 200, r.text
        self.accepted.append(d)
        if client in self.replicas:
            self.replicas[client].state.apply(d)  # a client applies its own write locally
            self.whole[client].write(d)

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
        assert rep.rows() == self.view(client)

    @rule(client=st.sampled_from(CLIENTS), limit=st.sampled_from([2, 100]))
    def whole_row_pull(self, client: str, limit: int) -> None:
        rep = self.whole[client]
        self.gateway.sync(self.token_of(client), client, rep, limit=limit, gw=self.gw)
        if self.rules is not None:  # it holds no null cells: a null reads as absent
            want = {
                k: {c: v for c, v in row.items() if v is not None}
                for k, row in self.view(client).items()
            }
            assert rep.rows() == want

    def view(self, client: str) -> dict[tuple[str, str], dict[str, Any]]:
        """What a client's replica holds after a full pull: filter(rules, claims, state)."""
        claims = {"sub": client, "gw": self.gw, "role": "client", "team": self.teams[client]}
        rules = None if self.rules is None else parse_rules(self.rules)
        return {
            k: v for k, v in merge_state(self.accepted).items() if visible(rules, claims, k[0], v)
        }

    @rule(index=st.integers(0, len(RULESETS) - 1))
    def change_rules(self, index: int) -> None:
        self.rules = RULESETS[index]
        r = self.gateway.http.post(
            f"/v1/admin/sync-rules/{self.gw}",
            json=self.rules,
            headers=auth(token("root", self.gw, "admin")),
        )
        assert r.status_code == 200, r.text

    @rule(client=st.sampled_from(CLIENTS), team=st.sampled_from(TEAMS))
    def change_team(self, client: str, team: str) -> None:
        self.teams[client] = team

    @rule(client=st.sampled_from(CLIENTS))
    def reinstall(self, client: str) -> None:
        """A fresh replica of the same client starts from since=0."""
        self.replicas[client] = Replica()
        self.whole[client] = WholeRowReplica()


@pytest.mark.slow
def test_replicas_equal_filtered_state(shared_gateway: Gateway) -> None:
    RulesMachine.gateway = shared_gateway
    run_state_machine_as_test(
        RulesMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
