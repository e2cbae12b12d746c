"""The outbox: local deltas waiting for (or acknowledged by) the gateway, and dead letters."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from lakesync.client._replica import ReplicaFile, _hlc_in
from lakesync.client._rows import ReplicaRows
from lakesync.client._types import Change
from lakesync.delta import RowDelta
from lakesync.wire import decode_delta


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A local delta waiting for the gateway's acknowledgement."""

    seq: int
    delta: RowDelta
    body: bytes
    attempts: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A local delta the gateway refused with a non-retryable error."""

    seq: int
    delta: RowDelta
    code: str
    error: str
    failed_at: float


class Outbox:
    """Queued deltas: what to push, acknowledgements, failures and dead letters."""

    def __init__(self, file: ReplicaFile, rows: ReplicaRows) -> None:
        self._file = file
        self._rows = rows

    def oldest(self, limit: int, max_bytes: int) -> list[OutboxEntry]:
        """The oldest queued deltas: at most ``limit`` and ``max_bytes`` (at least one)."""
        out: list[OutboxEntry] = []
        size = 0
        with self._file.lock:
            rows = self._file.conn.execute(
                "SELECT seq, body, attempts FROM _ls_outbox WHERE acked IS NULL ORDER BY seq"
                " LIMIT ?",
                (limit,),
            ).fetchall()
        for seq, body, attempts in rows:
            raw = bytes(body)
            if out and size + len(raw) > max_bytes:
                break
            size += len(raw)
            out.append(OutboxEntry(int(seq), decode_delta(raw), raw, int(attempts)))
        return out

    def ack(self, seqs: Sequence[int], server_hlc: int) -> None:
        """Mark entries acknowledged by a push answered with ``server_hlc``: they are no longer
        pushed, and stay merged into their rows until a pull sends them back (see above)."""
        with self._file.tx() as c:
            c.executemany(
                "UPDATE _ls_outbox SET acked = ? WHERE seq = ?",
                [(_hlc_in(server_hlc), s) for s in seqs],
            )
            # Already pulled past (a re-push of stored deltas): the replica holds them.
            self._rows.reshow(c, self._rows.confirmed(c, self._rows.pulled_to(c)), "remote")

    def record_failure(self, seqs: Sequence[int], error: str) -> None:
        """Count a failed attempt on outbox entries (kept for the next cycle)."""
        with self._file.tx() as c:
            c.executemany(
                "UPDATE _ls_outbox SET attempts = attempts + 1, last_error = ? WHERE seq = ?",
                [(error, s) for s in seqs],
            )

    def dead_letter(self, entry: OutboxEntry, code: str, error: str) -> list[Change]:
        """Move an entry the gateway refused for good from the outbox to the dead letters; its
        row then shows the acknowledged state and the remaining pending writes only."""
        key = (entry.delta.table, entry.delta.row_id)
        with self._file.tx() as c:
            before = self._rows.merged(c, *key).visible()
            c.execute(
                "INSERT OR REPLACE INTO _ls_dead_letters VALUES (?, ?, ?, ?, ?, ?)",
                (entry.seq, entry.delta.delta_id, entry.body, code, error, time.time()),
            )
            c.execute("DELETE FROM _ls_outbox WHERE seq = ?", (entry.seq,))
            return self._rows.reshow(c, {key: before}, "remote")

    def dead_letters(self) -> list[DeadLetter]:
        """Every dead-lettered delta, oldest first."""
        with self._file.lock:
            rows = self._file.conn.execute(
                "SELECT seq, body, code, error, failed_at FROM _ls_dead_letters ORDER BY seq"
            ).fetchall()
        return [
            DeadLetter(int(s), decode_delta(bytes(b)), c, e, float(f)) for s, b, c, e, f in rows
        ]

    def requeue_dead_letters(self) -> tuple[int, list[Change]]:
        """Put every dead-lettered delta back in the outbox (after fixing the cause); their rows
        show them again. Returns how many and the visible changes."""
        with self._file.tx() as c:
            letters = [
                (int(seq), decode_delta(bytes(body)))
                for seq, body in c.execute("SELECT seq, body FROM _ls_dead_letters").fetchall()
            ]
            keys = {(d.table, d.row_id) for _, d in letters}
            befores = {key: self._rows.merged(c, *key).visible() for key in keys}
            n = 0
            for seq, d in letters:
                n += c.execute(
                    "INSERT OR IGNORE INTO _ls_outbox (seq, delta_id, body, tbl, row_id) "
                    "SELECT seq, delta_id, body, ?, ? FROM _ls_dead_letters WHERE seq = ?",
                    (d.table, d.row_id, seq),
                ).rowcount
            c.execute("DELETE FROM _ls_dead_letters")
            return n, self._rows.reshow(c, befores, "local")

    def queue_depth(self) -> int:
        """How many local deltas wait for the gateway."""
        with self._file.lock:
            row = self._file.conn.execute("SELECT count(*) FROM _ls_outbox WHERE acked IS NULL")
            return int(row.fetchone()[0])

    def dead_letter_count(self) -> int:
        """How many deltas were dead-lettered."""
        with self._file.lock:
            row = self._file.conn.execute("SELECT count(*) FROM _ls_dead_letters").fetchone()
            return int(row[0])
