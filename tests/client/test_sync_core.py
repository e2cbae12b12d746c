"""The client's sync core without I/O: effects out, outcomes in (no socket, thread or SQLite)."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.client._backoff import Backoff
from lakesync.client._core import (
    Acknowledge,
    AdoptSchemas,
    Ahead,
    ApplyRows,
    BeginResync,
    CheckpointFrame,
    CloseCheckpoint,
    Collect,
    Conversation,
    Effect,
    Emit,
    Fail,
    FetchSchemas,
    FindUnknown,
    Finished,
    FinishResync,
    MoveToDeadLetters,
    NextFrame,
    OpenCheckpoint,
    OpenedCheckpoint,
    Pull,
    Push,
    ReadCursor,
    ReadOutbox,
    RecordFailure,
    ReportProgress,
    SyncCore,
    SyncProgress,
    SyncReport,
    Wait,
)
from lakesync.client._outbox import OutboxEntry
from lakesync.client.errors import (
    AuthError,
    ConnectionFailedError,
    CursorExpiredError,
    RateLimitedError,
    SyncFailedError,
    ValidationError,
)
from lakesync.client.transport import PullPage, PushResult
from lakesync.delta import RowDelta
from lakesync.hlc import encode
from lakesync.schema import parse_schema

T0 = encode(1_700_000_000_000, 0)
T_SCHEMA = [parse_schema({"table": "t", "columns": [{"name": "a", "type": "string"}]}, stored=True)]


def delta(row: str, i: int = 0) -> RowDelta:
    return RowDelta.create("INSERT", "t", row, "peer", {"a": row}, T0 + i)


def entry(seq: int, row: str) -> OutboxEntry:
    return OutboxEntry(seq, RowDelta.create("INSERT", "t", row, "me", {"a": row}, T0 + seq), b"", 0)


def core(**kw: Any) -> SyncCore:
    c = SyncCore(Backoff(base=1.0, cap=8.0, max_retries=2), rand=lambda: 0.0, **kw)
    c._schemas_adopted = True  # most tests start past the first cycle's schema fetch
    return c


def step(conversation: Conversation[Any], outcome: Any, expected: Effect) -> None:
    """Tell ``outcome`` and expect ``expected`` next."""
    assert conversation.send(outcome) == expected


class Gateway:
    """Answers the core's effects as a gateway and replica would; records every effect."""

    def __init__(
        self,
        pages: list[PullPage] | None = None,
        outbox: list[OutboxEntry] | None = None,
        refuse: set[str] = frozenset(),  # type: ignore[assignment]
        cursor: int = 1,
    ) -> None:
        self.pages = list(pages or [PullPage([], cursor, False)])
        self.outbox = list(outbox or [])
        self.refuse = refuse
        self.cursor = cursor
        self.log: list[Effect] = []
        self._ahead: Any = None

    def answer(self, effect: Effect) -> Any:
        match effect:
            case ReadCursor():
                return self.cursor
            case Pull():
                return self.pages.pop(0)
            case Ahead(request):
                self._ahead = self.answer(request)
                return None
            case Collect():
                return self._ahead
            case FindUnknown():
                return set()
            case ApplyRows(cursor=cursor) if cursor is not None:
                self.cursor = cursor
            case ReadOutbox(limit=limit):
                return self.outbox[:limit]
            case Push(deltas):
                bad = [d for d in deltas if d.row_id in self.refuse]
                if bad:
                    return Fail(ValidationError("refused"))
                return PushResult(99, len(deltas))
            case Acknowledge(seqs):
                self.outbox = [e for e in self.outbox if e.seq not in seqs]
            case MoveToDeadLetters(entry=dead):
                self.outbox = [e for e in self.outbox if e.seq != dead.seq]
        return None

    def run(self, conversation: Conversation[Any]) -> Any:
        outcome = conversation.start()
        while not isinstance(outcome, Finished):
            self.log.append(outcome)
            outcome = conversation.send(self.answer(outcome))
        return outcome.value


def test_a_first_sync_applies_the_checkpoint_frame_by_frame_then_pulls_from_its_position() -> None:
    c = SyncCore(Backoff(), rand=lambda: 0.0)
    sync = c.sync_once()
    assert sync.start() == FetchSchemas()
    schemas = [{"table": "t", "columns": [{"name": "a", "type": "string"}]}]
    step(sync, schemas, AdoptSchemas(T_SCHEMA))
    step(sync, None, ReadCursor())
    step(sync, 0, OpenCheckpoint())  # never pulled: the checkpoint first
    step(sync, OpenedCheckpoint(500), Ahead(NextFrame()))
    step(sync, None, Collect())
    frame = [delta("r1"), delta("r2")]
    step(sync, CheckpointFrame(frame, 100), Ahead(NextFrame()))  # the next frame while applying
    step(sync, None, FindUnknown(frame))
    step(sync, set(), ApplyRows(frame, checkpoint_at=500))
    step(sync, None, ReportProgress(SyncProgress(2, 100, "checkpoint")))
    step(sync, None, Collect())
    step(sync, None, CloseCheckpoint())  # the last frame came
    step(sync, None, ApplyRows([], cursor=500))  # the cursor moves once the snapshot is in
    step(sync, None, Pull(500, 1000))
    step(sync, PullPage([], 500, False), FindUnknown([]))
    step(sync, set(), ApplyRows([], cursor=500))
    step(sync, None, ReadOutbox(1000, 512 * 1024))
    step(sync, [], ReadCursor())
    assert sync.send(500) == Finished(SyncReport(2, 0, 0, 500))


def test_pull_pages_while_has_more_fetching_the_next_ahead_and_committing_each_cursor() -> None:
    pages = [
        PullPage([delta("a")], 10, True),
        PullPage([delta("b")], 20, True),
        PullPage([delta("c")], 30, False),
    ]
    gw = Gateway(pages, cursor=5)
    assert gw.run(core().pull()) == 3
    requests = [e for e in gw.log if isinstance(e, Pull | Ahead)]
    assert requests == [Pull(5, 1000), Ahead(Pull(10, 1000)), Ahead(Pull(20, 1000))]
    assert [e.cursor for e in gw.log if isinstance(e, ApplyRows)] == [10, 20, 30]
    assert [e.progress.rows for e in gw.log if isinstance(e, ReportProgress)] == [1, 2, 3]


def test_a_stalled_page_ends_the_pull_even_if_it_claims_more() -> None:
    gw = Gateway([PullPage([], 5, True)], cursor=5)
    assert gw.run(core().pull()) == 0
    assert not any(isinstance(e, Ahead) for e in gw.log)


def test_an_expired_cursor_resyncs_from_the_checkpoint_and_pulls_on() -> None:
    sync = core().pull()
    assert sync.start() == ReadCursor()
    step(sync, 40, Pull(40, 1000))
    expired = CursorExpiredError("the hot log no longer reaches 40")
    assert isinstance(sync.send(Fail(expired)), Emit)
    step(sync, None, OpenCheckpoint())
    step(sync, OpenedCheckpoint(900), BeginResync())  # mark what the checkpoint sends
    step(sync, None, Ahead(NextFrame()))
    step(sync, None, Collect())
    frame = [delta("kept")]
    step(sync, CheckpointFrame(frame, 10), Ahead(NextFrame()))
    step(sync, None, FindUnknown(frame))
    step(sync, set(), ApplyRows(frame, mark=True, checkpoint_at=900))
    step(sync, None, ReportProgress(SyncProgress(1, 10, "checkpoint")))
    step(sync, None, Collect())
    step(sync, None, CloseCheckpoint())
    step(sync, None, FinishResync(900))  # forget the rows the checkpoint did not send
    step(sync, None, Pull(900, 1000))
    step(sync, PullPage([], 900, False), FindUnknown([]))
    step(sync, set(), ApplyRows([], cursor=900))
    assert sync.send(None) == Finished(1)


def test_an_expired_cursor_without_a_checkpoint_fails() -> None:
    sync = core().pull()
    sync.start()
    sync.send(7)
    sync.send(Fail(CursorExpiredError("gone")))  # the resync event
    assert sync.send(None) == OpenCheckpoint()
    with pytest.raises(CursorExpiredError):
        sync.send(None)


def test_a_failed_frame_closes_the_download_and_a_failed_apply_waits_for_the_request_ahead(
) -> None:
    sync = core().pull()
    sync.start()
    sync.send(0)
    step(sync, OpenedCheckpoint(5), Ahead(NextFrame()))
    step(sync, None, Collect())
    frame = [delta("x")]
    step(sync, CheckpointFrame(frame, 1), Ahead(NextFrame()))
    step(sync, None, FindUnknown(frame))
    step(sync, set(), ApplyRows(frame, checkpoint_at=5))
    # The replica failed: the frame on its way is received (and dropped) before giving up.
    step(sync, Fail(ValidationError("disk full")), Collect())
    step(sync, CheckpointFrame([], 2), CloseCheckpoint())
    with pytest.raises(ValidationError):
        sync.send(None)


def test_push_sends_the_outbox_in_batches_and_acknowledges_each() -> None:
    outbox = [entry(i, f"r{i}") for i in range(1, 6)]
    gw = Gateway(outbox=outbox)
    assert gw.run(core(push_batch=2).push()) == (5, 0)
    assert [e.seqs for e in gw.log if isinstance(e, Acknowledge)] == [[1, 2], [3, 4], [5]]
    assert [len(e.deltas) for e in gw.log if isinstance(e, Push)] == [2, 2, 1]


def test_a_refused_batch_is_bisected_and_only_the_culprit_dead_lettered() -> None:
    outbox = [entry(i, r) for i, r in enumerate(["r1", "r2", "bad", "r3", "r4"], 1)]
    gw = Gateway(outbox=outbox, refuse={"bad"})
    assert gw.run(core().push()) == (4, 1)
    [dead] = [e for e in gw.log if isinstance(e, MoveToDeadLetters)]
    assert dead.entry.delta.row_id == "bad" and dead.code == "VALIDATION_ERROR"
    [event] = [e.event for e in gw.log if isinstance(e, Emit)]
    assert event.kind == "dead_letter" and event.detail["row_id"] == "bad"
    assert sorted(s for e in gw.log if isinstance(e, Acknowledge) for s in e.seqs) == [1, 2, 4, 5]
    assert gw.outbox == []


def test_a_push_that_cannot_reach_the_gateway_counts_a_failed_attempt_and_fails() -> None:
    push = core().push()
    push.start()
    step(push, [entry(1, "r")], ReadCursor())
    assert isinstance(push.send(3), Push)
    step(push, Fail(ConnectionFailedError("down")), RecordFailure([1], "down"))
    with pytest.raises(ConnectionFailedError):
        push.send(None)


def test_transient_failures_wait_a_growing_backoff_then_give_up() -> None:
    sync = core().sync()
    assert sync.start() == ReadCursor()
    waits = []
    for attempt in range(3):
        if attempt:
            assert sync.send(None) == ReadCursor()  # the next attempt starts over
        sync.send(4)  # the cursor: a pull follows
        event = sync.send(Fail(ConnectionFailedError("down")))
        assert isinstance(event, Emit) and event.event.kind == "sync_error"
        if attempt < 2:
            wait = sync.send(None)
            assert isinstance(wait, Wait)
            waits.append(wait.seconds)
    assert waits == [0.5, 1.0]  # equal jitter with no random half: base·2ⁿ / 2
    with pytest.raises(SyncFailedError) as info:
        sync.send(None)
    assert isinstance(info.value.cause, ConnectionFailedError)


def test_a_rate_limit_waits_at_least_its_retry_after_and_auth_errors_are_not_retried() -> None:
    sync = core().sync()
    sync.start()
    sync.send(4)
    sync.send(Fail(RateLimitedError("slow", 2.5)))
    assert sync.send(None) == Wait(2.5)
    other = core().sync()
    other.start()
    other.send(4)
    other.send(Fail(AuthError("bad token")))
    with pytest.raises(AuthError):
        other.send(None)


def test_a_name_the_replica_lacks_is_asked_about_once() -> None:
    c = core()
    pull = c.pull()
    pull.start()
    page = [delta("r")]
    step(pull, 3, Pull(3, 1000))
    step(pull, PullPage(page, 4, False), FindUnknown(page))
    step(pull, {("t", "new")}, FetchSchemas())
    step(pull, None, AdoptSchemas([]))
    step(pull, None, ApplyRows(page, cursor=4))
    again = c.pull()
    again.start()
    step(again, 4, Pull(4, 1000))
    step(again, PullPage(page, 5, False), FindUnknown(page))
    step(again, {("t", "new")}, ApplyRows(page, cursor=5))  # asked already


def test_broadcasts_apply_at_once_without_moving_the_cursor() -> None:
    assert SyncCore.broadcast([delta("r")]) == ApplyRows([delta("r")], "realtime")
