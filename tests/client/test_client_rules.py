"""Sync rules end to end against real gateway processes (SQLite and PostgreSQL stores).

A client learns nothing outside its view (a fresh client receives exactly its view; rules and
claims changes evict only rows it saw), and its own pending edits never flicker back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from lakesync.client import LakeSyncClient
from lakesync.delta import RowDelta, is_view_eviction
from lakesync.merge import MergedState, RowState, apply_delta
from lakesync.rules import SyncRules, parse_rules, visible
from lakesync.wire import decode_delta
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json, verified

pytestmark = pytest.mark.slow

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "owner", "type": "string"},
        {"name": "team", "type": "string"},
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
    ],
}
OWNER = {"name": "mine", "tables": ["todos"], "filters": [
    {"column": "owner", "op": "eq", "value": "jwt:sub"}]}
TEAM = {"name": "team", "tables": ["todos"], "filters": [
    {"column": "team", "op": "in", "value": "jwt:teams"}]}


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One gateway process per store; tests isolate themselves with their own gateway id."""
    env = {"LAKESYNC_WS_RATE_LIMIT": "0", "LAKESYNC_RATE_LIMIT": "0"}
    schema = None
    if request.param == "postgres":
        require_postgres()
        schema = fresh_pg_schema()
        env |= {"LAKESYNC_STORE_URL": PG_DSN, "LAKESYNC_PG_SCHEMA": schema}
    data = tmp_path_factory.mktemp(f"rules-{request.param}") / "data"
    data.mkdir()
    with ServerProcess(data, env) as proc:
        yield proc
    if schema is not None:
        drop_pg_schema(schema)


_gw_seq = iter(range(10**6))


@pytest.fixture
def gw() -> str:
    return f"rules{next(_gw_seq)}"


def admin(server: ServerProcess, gw: str, path: str, body: object) -> None:
    resp = httpx.post(
        f"{server.url}/v1/admin/{path}/{gw}", json=body, headers=auth(token("ops", gw, "admin"))
    )
    assert resp.status_code == 200, resp.text


def set_rules(server: ServerProcess, gw: str, *buckets: dict[str, Any]) -> None:
    admin(server, gw, "sync-rules", {"version": 1, "buckets": list(buckets)})


def push(server: ServerProcess, gw: str, sub: str, deltas: list[RowDelta]) -> None:
    body = {"clientId": sub, "deltas": [as_json(d) for d in deltas]}
    resp = httpx.post(
        f"{server.url}/v1/sync/{gw}/push", json=body, headers=auth(token(sub, gw)), timeout=60
    )
    assert resp.status_code == 200, resp.text


def pull_all(
    server: ServerProcess, gw: str, tok: str, since: int = 0
) -> tuple[list[RowDelta], int, int]:
    """Every delta a client receives from ``since`` on: (deltas, cursor after, bytes received)."""
    out: list[RowDelta] = []
    size = 0
    while True:
        resp = httpx.get(
            f"{server.url}/v1/sync/{gw}/pull",
            params={"since": since, "clientId": _sub(tok), "limit": 10_000},
            headers=auth(tok),
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        size += len(resp.content)
        body = resp.json()
        out += [verified(d) for d in body["deltas"]]
        since = int(body["serverHlc"])
        if not body["hasMore"]:
            return out, since, size


def _sub(tok: str) -> str:
    from lakesync.tokens import unverified_claims

    return str(unverified_claims(tok)["sub"])


def rows_of(sub: str, n: int, **cols: Any) -> list[RowDelta]:
    h = now_hlc()
    return [
        RowDelta.create("INSERT", "todos", f"{sub}-{i}@example.com", sub, cols, h + i)
        for i in range(n)
    ]


def client(
    server: ServerProcess, gw: str, sub: str, path: str | Path = ":memory:", **kw: Any
) -> LakeSyncClient:
    kw.setdefault("token", token(sub, gw))
    return LakeSyncClient(str(path), url=server.url, gateway_id=gw, schemas=[TODOS], **kw)


def replica(c: LakeSyncClient) -> dict[str, dict[str, Any]]:
    out = {}
    for r in c.query("select * from todos"):
        rid = r.pop("row_id")
        out[rid] = {k: v for k, v in r.items() if v is not None}
    return out


def test_a_fresh_client_learns_nothing_outside_its_view(server: ServerProcess, gw: str) -> None:
    set_rules(server, gw, OWNER)
    bobs = rows_of("bob", 2_000, owner="bob", title="secret")
    for i in range(0, len(bobs), 1_000):
        push(server, gw, "bob", bobs[i : i + 1_000])
    push(server, gw, "alice", rows_of("alice", 1, owner="alice", title="mine"))

    deltas, _, _ = pull_all(server, gw, token("alice", gw))
    assert {d.row_id for d in deltas} == {"alice-0@example.com"}
    assert len(deltas) == 2  # the eviction that opens a snapshot, and the row's one write
    carol, _, _ = pull_all(server, gw, token("carol", gw))
    assert carol == []
    with client(server, gw, "alice") as alice:
        alice.sync()
        assert replica(alice) == {"alice-0@example.com": {"owner": "alice", "title": "mine"}}


def test_rules_and_claims_changes_evict_only_rows_seen_before(
    server: ServerProcess, gw: str
) -> None:
    set_rules(server, gw, OWNER)
    push(server, gw, "bob", rows_of("bob", 30, owner="bob", team="blue"))
    red = rows_of("dave", 5, owner="dave", team="red")
    push(server, gw, "dave", red)
    red_ids = {d.row_id for d in red}
    carol = token("carol", gw, teams=["red"])
    seen, cursor, _ = pull_all(server, gw, carol)
    assert seen == []

    set_rules(server, gw, OWNER, TEAM)  # carol now sees the red rows, and only them
    got, cursor, _ = pull_all(server, gw, carol, cursor)
    assert {d.row_id for d in got} == red_ids
    assert not any(d.op == "DELETE" and not is_view_eviction(d) for d in got)

    set_rules(server, gw, OWNER)  # back: the red rows leave her view, nothing else is named
    got, cursor, _ = pull_all(server, gw, carol, cursor)
    assert {d.row_id for d in got} == red_ids and all(is_view_eviction(d) for d in got)

    set_rules(server, gw, OWNER, TEAM)
    _, cursor, _ = pull_all(server, gw, carol, cursor)
    blue = token("carol", gw, teams=["blue"])  # her claims change: red leaves, blue arrives
    got, cursor, _ = pull_all(server, gw, blue, cursor)
    evicted = {d.row_id for d in got if is_view_eviction(d) and not any(
        x.row_id == d.row_id and x.op != "DELETE" for x in got)}
    shown = {d.row_id for d in got if d.op != "DELETE"}
    assert evicted == red_ids
    assert shown == {f"bob-{i}@example.com" for i in range(30)}

    # Alice never saw any of these rows through all the changes: she hears of none.
    alice, _, _ = pull_all(server, gw, token("alice", gw))
    assert alice == []


@pytest.mark.parametrize("transport", ["http", "websocket"])
@pytest.mark.parametrize("restart", [False, True])
def test_a_pending_edit_never_flickers_back(
    server: ServerProcess, gw: str, tmp_path: Path, transport: Literal["http", "websocket"],
    restart: bool,
) -> None:
    set_rules(server, gw, OWNER)
    path = tmp_path / "alice.db"
    alice = client(server, gw, "alice", path, transport=transport)
    alice.insert("todos", "t1", {"owner": "alice", "title": "old", "done": False})
    alice.sync()
    alice.update("todos", "t1", {"title": "mine"})  # offline
    with client(server, gw, "ops", token=token("ops", gw, "admin")) as ops:
        ops.sync()
        ops.update("todos", "t1", {"done": True})  # meanwhile, another writer
        ops.sync()
    if restart:  # a restart with a non-empty outbox
        alice.close()
        alice = client(server, gw, "alice", path, transport=transport)
    with alice:
        alice.engine.pull()  # before her edit reaches the gateway: it still wins locally
        assert replica(alice) == {"t1": {"owner": "alice", "title": "mine", "done": True}}
        alice.sync()
        assert replica(alice) == {"t1": {"owner": "alice", "title": "mine", "done": True}}
        assert alice.queue_depth == 0


def test_a_refused_edit_stops_showing(server: ServerProcess, gw: str) -> None:
    set_rules(server, gw, OWNER)
    with client(server, gw, "alice") as alice, client(server, gw, "bob") as bob:
        alice.insert("todos", "t1", {"owner": "alice", "title": "a"})
        alice.sync()
        alice.update("todos", "t1", {"title": "edited offline"})
        with client(server, gw, "ops", token=token("ops", gw, "admin")) as ops:
            ops.sync()
            ops.update("todos", "t1", {"owner": "bob"})
            ops.sync()
        alice.sync()  # the row left her view; her edit of it is refused (403) and dropped
        assert replica(alice) == {}
        assert [d.delta.values() for d in alice.dead_letters()] == [{"title": "edited offline"}]
        bob.sync()
        assert replica(bob) == {"t1": {"owner": "bob", "title": "a"}}


# -- the state machine ------------------------------------------------------------------------

MACHINE_CLIENTS: dict[str, Literal["http", "websocket"]] = {
    "alice": "http",
    "bob": "websocket",
    "carol": "http",
}
NAMES = sorted(MACHINE_CLIENTS)


class RulesMachine(RuleBasedStateMachine):
    """Clients with offline periods, restarts, hand-overs, claims and rules changes.

    The model is the set of deltas the gateway acknowledged. After each client's sync its
    replica must equal ``filter(rules, claims, merge(acknowledged)) ⊕ its outbox`` (the writes
    the pull did not send back), and every rowId it ever received must name a row that was
    visible to it at some point, or one it wrote. "Visible to it" is under the claims it has
    presented: a new token takes effect when the client first uses it (until then the old one
    is still valid, so what it would show still counts as seen).
    """

    server: ServerProcess
    tmp: Path

    def __init__(self) -> None:
        super().__init__()
        self.gw = f"sm{next(_gw_seq)}"
        self.team_bucket = True
        set_rules(self.server, self.gw, OWNER, TEAM)
        self.teams = {"alice": ["red"], "bob": ["blue"], "carol": ["red", "blue"]}
        self.presented = dict(self.teams)
        self.received: dict[str, set[str]] = {c: set() for c in NAMES}
        self.ever: dict[str, set[str]] = {c: set() for c in NAMES}
        self.written: dict[str, set[str]] = {c: set() for c in NAMES}
        self.acked: list[RowDelta] = []
        self.n = 0
        self.clients = {c: self._open(c) for c in NAMES}

    def _open(self, name: str) -> LakeSyncClient:
        c = client(
            self.server,
            self.gw,
            name,
            self.tmp / f"{self.gw}-{name}.db",
            token=token(name, self.gw, teams=self.teams[name]),
            transport=MACHINE_CLIENTS[name],
        )
        store = c._store
        apply = store.apply_remote

        def recording(deltas: Any, *args: Any, **kw: Any) -> Any:
            self.received[name].update(d.row_id for d in deltas)
            return apply(deltas, *args, **kw)

        store.apply_remote = recording  # type: ignore[method-assign]
        return c

    def _rules(self) -> SyncRules:
        buckets = [OWNER, TEAM] if self.team_bucket else [OWNER]
        return parse_rules({"version": 1, "buckets": buckets})

    def _claims(self, name: str, teams: dict[str, list[str]] | None = None) -> dict[str, Any]:
        return {"sub": name, "role": "client", "teams": (teams or self.teams)[name]}

    def _state(self) -> MergedState:
        state = MergedState()
        for d in self.acked:
            state.apply(d)
        return state

    def _expected(self, name: str, state: MergedState, outbox: list[RowDelta]) -> dict[str, Any]:
        rules, claims = self._rules(), self._claims(name)
        rows: dict[tuple[str, str], RowState] = {}
        for key, row in state.rows.items():
            if row.live and visible(rules, claims, key[0], row.visible()):
                rows[key] = RowState(dict(row.cells), row.write, row.tombstone)
            elif not row.live and row.tombstone is not None:
                rows[key] = RowState({}, None, row.tombstone)
        for d in outbox:
            apply_delta(rows.setdefault((d.table, d.row_id), RowState()), d)
        out = {}
        for (_, rid), row in rows.items():
            vis = row.visible()
            if vis is not None:
                out[rid] = {k: v for k, v in vis.items() if v is not None}
        return out

    @staticmethod
    def _outbox(c: LakeSyncClient) -> list[RowDelta]:
        return [d for d in map(_decode_body, c._store.conn.execute(
            "SELECT body FROM _ls_outbox ORDER BY seq").fetchall())]

    @rule(name=st.sampled_from(NAMES), owner=st.sampled_from(NAMES),
          team=st.sampled_from(["red", "blue", None]), title=st.sampled_from(["a", "b"]))
    def insert(self, name: str, owner: str, team: str | None, title: str) -> None:
        rid = f"{name}-{self.n}"
        self.n += 1
        self.clients[name].insert("todos", rid, {"owner": owner, "team": team, "title": title})
        self.written[name].add(rid)

    @rule(name=st.sampled_from(NAMES), data=st.data())
    def update(self, name: str, data: st.DataObject) -> None:
        rows = replica(self.clients[name])
        if not rows:
            return
        rid = data.draw(st.sampled_from(sorted(rows)))
        values = data.draw(
            st.sampled_from(
                [
                    {"title": data.draw(st.sampled_from(["x", "y", "z"]))},
                    {"done": data.draw(st.booleans())},
                    {"owner": data.draw(st.sampled_from(NAMES))},  # a hand-over
                    {"team": data.draw(st.sampled_from(["red", "blue"]))},
                ]
            )
        )
        self.clients[name].update("todos", rid, values)

    @rule(name=st.sampled_from(NAMES), data=st.data())
    def delete(self, name: str, data: st.DataObject) -> None:
        rows = replica(self.clients[name])
        if rows:
            self.clients[name].delete("todos", data.draw(st.sampled_from(sorted(rows))))

    @rule(name=st.sampled_from(NAMES))
    def restart(self, name: str) -> None:
        self.clients[name].close()
        self.clients[name] = self._open(name)

    @rule(
        name=st.sampled_from(NAMES),
        teams=st.sampled_from([[], ["red"], ["blue"], ["red", "blue"]]),
    )
    def change_claims(self, name: str, teams: list[str]) -> None:
        self.teams[name] = teams
        self.restart(name)  # a new token, as a refresh would bring

    @rule()
    def change_rules(self) -> None:
        self.team_bucket = not self.team_bucket
        set_rules(self.server, self.gw, *([OWNER, TEAM] if self.team_bucket else [OWNER]))
        self._see()

    @rule(name=st.sampled_from(NAMES))
    def sync(self, name: str) -> None:
        c = self.clients[name]
        before = self._state()
        unacked = [e.delta for e in c._store.outbox(10**6, 1 << 40)]
        dead_before = {x.delta.delta_id for x in c.dead_letters()}
        c.sync()
        self.presented[name] = self.teams[name]
        dead = {x.delta.delta_id for x in c.dead_letters()} - dead_before
        accepted = [d for d in unacked if d.delta_id not in dead]
        self.acked += accepted
        self._see_each(accepted)
        # Its accepted writes show on top of what it pulled, whether still in the outbox or
        # already confirmed (a push split around a refused delta may confirm the first part).
        assert replica(c) == self._expected(name, before, accepted + self._outbox(c))
        self._see()
        for other in NAMES:
            assert self.received[other] <= self.ever[other] | self.written[other], other

    def _see_each(self, accepted: list[RowDelta]) -> None:
        """Record the rows each delta of a push made visible, one delta at a time: the gateway
        applies a push's deltas in order, so a row inserted and deleted in one push was in
        every view its inserted state matched in between (a client that pulled then would have
        had it), and its tombstone may reach those views."""
        state, rules = self._state_before(accepted), self._rules()
        for d in accepted:
            state.apply(d)
            row = state.rows[(d.table, d.row_id)]
            for name in NAMES:
                if visible(rules, self._claims(name, self.presented), d.table, row.visible()):
                    self.ever[name].add(d.row_id)

    def _state_before(self, accepted: list[RowDelta]) -> MergedState:
        state = MergedState()
        for d in self.acked[: len(self.acked) - len(accepted)]:
            state.apply(d)
        return state

    def _see(self) -> None:
        """Record what each client may see now (the rows ever visible to it)."""
        state, rules = self._state(), self._rules()
        for name in NAMES:
            claims = self._claims(name, self.presented)
            self.ever[name] |= {
                rid for (t, rid), row in state.rows.items()
                if visible(rules, claims, t, row.visible())
            }

    def teardown(self) -> None:
        for c in self.clients.values():
            c.close()


def _decode_body(row: tuple[bytes]) -> RowDelta:
    return decode_delta(bytes(row[0]))


def test_rules_state_machine(server: ServerProcess, tmp_path: Path) -> None:
    RulesMachine.server = server
    RulesMachine.tmp = tmp_path
    run_state_machine_as_test(
        RulesMachine,
        settings=settings(
            max_examples=12,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def test_a_broadcast_never_reverts_a_pending_edit(server: ServerProcess, gw: str) -> None:
    """After every applied WebSocket broadcast too, a pending edit stays on top."""
    set_rules(server, gw, OWNER)
    with client(server, gw, "alice", transport="websocket") as alice:
        alice.insert("todos", "t1", {"owner": "alice", "title": "old", "done": False})
        alice.sync()
        alice.connect()
        alice.update("todos", "t1", {"title": "mine"})  # pending: not pushed
        with client(server, gw, "ops", token=token("ops", gw, "admin")) as ops:
            ops.sync()
            ops.update("todos", "t1", {"done": True})
            ops.sync()  # broadcast to alice: the row's snapshot with a newer cell
        deadline = time.monotonic() + 15
        while replica(alice)["t1"].get("done") is not True:
            assert time.monotonic() < deadline, "the broadcast never arrived"
            time.sleep(0.02)
        assert replica(alice) == {"t1": {"owner": "alice", "title": "mine", "done": True}}
        assert alice.queue_depth == 1
