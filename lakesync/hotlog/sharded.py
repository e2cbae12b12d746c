"""A deployment's tables spread over several hot-log stores, served as one store.

:class:`ShardedHotLog` is a :class:`~lakesync.hotlog.base.HotLog` over one store per shard
(:mod:`lakesync.shard_specs`), opened by :func:`open_sharded`: the default store holds every
table no shard lists, the gateways' documents, leaders and mutexes.

One ingest order across the stores: a position (a cursor, ``head``, an entry's ``ingest_hlc``)
is one ingest HLC, the same position in every store. What is served is bounded by the *visible
bound* (:meth:`ShardedHotLog.bound`): each store's committed head is read, the greatest is the
target, and every store below it raises its floor to it (:meth:`~lakesync.hotlog.ports.PushLog.
raise_floor`, one write serialised with the store's appends; concurrent callers share one).
Then every entry at or below the bound, in any store, is committed, and no later commit in any
store gets a stamp at or below it: a reader that has seen position ``h`` never finds a new
entry at or below ``h`` in any store, as with one store.

- a push is split by table and each store appends its part (skipping the deltaIds it already
  holds, as every store does); it is acknowledged once every part is durable, its ``head`` the
  bound after them (safe for a client that sets its cursor to it; the last bound known when
  a store the push did not touch is down). A part that fails fails the
  push with that store's error (an outage: retryable), so the client's retry lands each delta
  once: the stores that kept their part skip it;
- a page reads each store after the same position, keeps what is at or below the bound and
  merges by ingest HLC; it is cut at an HLC boundary (entries of one stamp in two stores stay
  on one page) and ``has_more`` is exact. A store that fails fails the read (the bound needs
  every store): no store is silently left out.

Checkpoints are kept in the default store (built from the lake, they cover every store); the
other stores record each one's position, which bounds their trimming, and a cursor below any
store's horizon is expired. Not served across stores yet, and refused rather than served
wrong: sync rules (setting them, or a gateway whose default store holds some: a client would
see rows they hide).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import msgspec

from lakesync.config import StoreConfig
from lakesync.delta import RowDelta
from lakesync.errors import ConfigError, is_store_outage
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.factory import open_store
from lakesync.hotlog.records import (
    AppendResult,
    CheckpointInfo,
    LogEntry,
    LogNotice,
    Page,
    RulesRecord,
    WriteCheck,
)
from lakesync.merge import RowState
from lakesync.rules import SyncRules
from lakesync.shard_specs import DEFAULT_SHARD, ShardSpec
from lakesync.views import RowKey, RowRecord

__all__ = ["ShardedHotLog", "clip", "merge_pages", "open_hot_log", "open_sharded"]

_NO_RULES = "sync rules are not served on a sharded hot log yet; remove shards: or the rules"


def clip(entries: Sequence[LogEntry], bound: int, limit: int) -> tuple[list[LogEntry], bool]:
    """One store's read of up to ``limit + 1`` entries (ingest order) as what is visible: those
    at or below ``bound``, at most ``limit``, and whether it holds more at or below ``bound``
    (exact: the extra entry read says so). Pure."""
    visible = [e for e in entries if e.ingest_hlc <= bound]
    return visible[:limit], len(visible) > limit


def merge_pages(
    pages: Sequence[tuple[Sequence[LogEntry], bool]], limit: int
) -> tuple[list[LogEntry], bool]:
    """Merge one page per store (its entries in ingest order, whether it holds more) into one
    page of about ``limit`` entries, oldest ingest HLC first (ties in store order), and whether
    anything is left. Nothing past the last entry of a store that holds more is taken (that
    store's next entries may come before it), and the page ends at an HLC boundary: entries of
    the last stamp taken are all taken (the page passes ``limit`` only when cutting back would
    leave it empty). Pure."""
    stop = min((e[-1].ingest_hlc for e, more in pages if more and e), default=None)
    merged = [
        entry
        for _, _, entry in heapq.merge(
            *[[(e.ingest_hlc, i, e) for e in entries] for i, (entries, _) in enumerate(pages)]
        )
    ]
    candidates = merged if stop is None else [e for e in merged if e.ingest_hlc <= stop]
    taken = candidates[:limit]
    if taken and len(taken) < len(candidates) and candidates[len(taken)].ingest_hlc == (
        last := taken[-1].ingest_hlc
    ):
        whole = [e for e in taken if e.ingest_hlc < last]
        taken = whole or [e for e in candidates if e.ingest_hlc <= last]
    return taken, len(taken) < len(merged) or any(more for _, more in pages)


class _Floor:
    """One store's floor raises, one at a time: a caller that waited for the raise under way
    finds its target reached by it and writes nothing."""

    def __init__(self, store: HotLog) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._reached = 0

    def raise_to(self, target: int) -> None:
        with self._lock:
            if self._reached < target:
                self._reached = max(self._reached, self._store.raise_floor(target))


class ShardedHotLog(HotLog):
    """One store per shard served as one (see the module): pushes split by table, pages merged
    by ingest HLC up to the visible bound. ``stores`` are the default store then one per shard
    of ``shards``, in that order, all sharing one clock."""

    def __init__(self, stores: Sequence[HotLog], shards: Sequence[ShardSpec]) -> None:
        if len(stores) != len(shards) + 1:
            raise ValueError("one store for the default shard and one per shard")
        if any(s.clock is not stores[0].clock for s in stores):
            raise ValueError("the stores must share one clock (ingest HLCs are merged)")
        super().__init__(stores[0].clock)
        self._stores = list(stores)
        self.names = [DEFAULT_SHARD, *(s.name for s in shards)]
        self._route = {t: i for i, s in enumerate(shards, start=1) for t in s.tables}
        self._floors = [_Floor(s) for s in stores]
        self._last_bound = 0

    @property
    def stores(self) -> Mapping[str, HotLog]:
        """Each shard's store by shard name, the default store first."""
        return dict(zip(self.names, self._stores, strict=True))

    def _index(self, table: str) -> int:
        return self._route.get(table, 0)

    # -- the visible bound ----------------------------------------------------------------------
    def bound(self) -> int:
        """The visible bound (see the module): every store's committed head read, those below
        the greatest raised to it. A store that cannot be reached fails it (an outage)."""
        heads = [s.committed_head() for s in self._stores]
        target = max(heads)
        for floor, head in zip(self._floors, heads, strict=True):
            if head < target:
                floor.raise_to(target)
        self._last_bound = max(self._last_bound, target)
        return target

    def committed_head(self) -> int:
        """See :meth:`~lakesync.hotlog.ports.PushLog.committed_head`: the visible bound."""
        return self.bound()

    def raise_floor(self, stamp: int) -> int:
        """See :meth:`~lakesync.hotlog.ports.PushLog.raise_floor`: every store's floor."""
        for floor in self._floors:
            floor.raise_to(stamp)
        return self.bound()

    # -- the push path --------------------------------------------------------------------------
    def append(
        self, gateway_id: str, deltas: Sequence[RowDelta], check: WriteCheck | None = None
    ) -> AppendResult:
        """Store a push: each store its tables' part, durably; see the module for failures."""
        parts: dict[int, list[RowDelta]] = {}
        for delta in deltas:
            parts.setdefault(self._index(delta.table), []).append(delta)
        results = {i: self._stores[i].append(gateway_id, part, check) for i, part in parts.items()}
        # In ingest order across the stores, ties in store order.
        ordered = sorted((e.ingest_hlc, i, e) for i, r in results.items() for e in r.stored)
        stored = [e for _, _, e in ordered]
        rows: dict[RowKey, RowRecord] = {}
        before: dict[RowKey, RowState] = {}
        for r in results.values():
            rows.update(r.rows)
            before.update(r.before)
        # What the append was judged under, as this store serves it (:meth:`get_rules`).
        rules = RulesRecord(None, 0) if stored else None
        try:
            head = self.bound()
        except Exception as exc:
            if not is_store_outage(exc):
                raise
            # The push is durable: acknowledged with the last bound known (a bound never stops
            # being safe), as a store it did not touch is down.
            head = self._last_bound
        return AppendResult(
            stored=stored,
            accepted=sum(r.accepted for r in results.values()),
            head=head,
            rows=rows,
            before=before,
            rules=rules,
        )

    # -- the pull path --------------------------------------------------------------------------
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """Each store's entries after ``after`` up to the bound, merged (:func:`merge_pages`)."""
        bound = self.bound()
        if after >= bound:
            return Page([], {}, bound, False)
        pages = [s.read_page(gateway_id, after, limit + 1, with_rows) for s in self._stores]
        entries, more = merge_pages([clip(p.entries, bound, limit) for p in pages], limit)
        return self._merged(pages, entries, bound, more)

    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """Each store's entries in the range, up to the bound, merged; ``head`` the range's
        end as served."""
        upto = min(upto, self.bound())
        pages = [s.read_range(gateway_id, after, upto) for s in self._stores]
        whole = sum(len(p.entries) for p in pages)
        entries, _ = merge_pages([(p.entries, False) for p in pages], whole)
        return self._merged(pages, entries, upto, False)

    @staticmethod
    def _merged(pages: Sequence[Page], entries: list[LogEntry], head: int, more: bool) -> Page:
        """One page of the merged ``entries`` and the rows they touch."""
        keys = {(e.delta.table, e.delta.row_id) for e in entries}
        rows = {k: v for p in pages for k, v in p.rows.items() if k in keys}
        return Page(entries, rows, head, more)

    def read_all_rows(self, gateway_id: str) -> Page:
        """Every store's rows of the gateway, and the bound (taken first: the rows read after
        it hold every entry at or below it)."""
        bound = self.bound()
        rows = {k: v for s in self._stores for k, v in s.read_all_rows(gateway_id).rows.items()}
        return Page([], rows, bound, False)

    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """Not served across stores (only rules ask for it): every row is read instead."""
        return None

    def read_relation(
        self, gateway_id: str, table: str, lookups: Sequence[tuple[str, Sequence[str]]] | None
    ) -> dict[RowKey, RowState]:
        """The table's rows from the one store that holds it."""
        return self._stores[self._index(table)].read_relation(gateway_id, table, lookups)

    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int
    ) -> dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]]:
        """Each row's history from its own store."""
        out: dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]] = {}
        for i, mine in self._by_store(keys).items():
            out.update(self._stores[i].row_history(gateway_id, mine, since, upto))
        return out

    def _by_store(self, keys: Sequence[RowKey]) -> dict[int, list[RowKey]]:
        """``keys`` grouped by the store holding their table."""
        groups: dict[int, list[RowKey]] = {}
        for key in keys:
            groups.setdefault(self._index(key[0]), []).append(key)
        return groups

    def rows_written_by(self, gateway_id: str, client_id: str) -> list[RowKey]:
        """Every store's rows the client wrote."""
        return [k for s in self._stores for k in s.rows_written_by(gateway_id, client_id)]

    def rows_written_among(
        self, gateway_id: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """Those of ``keys`` the client wrote, each looked up in its own store."""
        found: set[RowKey] = set()
        for i, mine in self._by_store(keys).items():
            found |= self._stores[i].rows_written_among(gateway_id, client_id, mine)
        return found

    def rows_written_if_few(
        self, gateway_id: str, client_id: str, limit: int
    ) -> set[RowKey] | None:
        """Every store's rows the client wrote, if each store has few (None otherwise)."""
        found: set[RowKey] = set()
        for store in self._stores:
            rows = store.rows_written_if_few(gateway_id, client_id, limit)
            if rows is None:
                return None
            found |= rows
        return found

    def view_stamp(
        self, gateway_id: str, client_id: str, claims_hash: str, claims: Mapping[str, Any]
    ) -> int:
        """The client's claims stamp, kept in the default store."""
        return self._stores[0].view_stamp(gateway_id, client_id, claims_hash, claims)

    def view_history(
        self, gateway_id: str, client_id: str, since: int
    ) -> tuple[list[tuple[int, SyncRules | None]], list[tuple[int, dict[str, Any]]]]:
        """The client's view history, kept in the default store."""
        return self._stores[0].view_history(gateway_id, client_id, since)

    # -- the initial sync (checkpoints in the default store) -----------------------------------
    def checkpoint(self, gateway_id: str) -> CheckpointInfo | None:
        """The default store's checkpoint (it covers every store: it is built from the lake,
        which lands every store up to the bound), with the greatest horizon of the stores."""
        info = self._stores[0].checkpoint(gateway_id)
        if info is None:
            return None
        return msgspec.structs.replace(info, trimmed=self.trimmed_through(gateway_id))

    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        """A chunk of the checkpoint, from the default store."""
        return self._stores[0].checkpoint_chunk(gateway_id, upto, seq)

    def stage_checkpoint_chunk(self, gateway_id: str, upto: int, seq: int, body: bytes) -> None:
        """Staged in the default store."""
        self._stores[0].stage_checkpoint_chunk(gateway_id, upto, seq, body)

    def publish_checkpoint(self, gateway_id: str, upto: int, chunks: int, rows: int) -> bool:
        """Published in the default store; each other store then records the position without
        chunks (it serves none), which bounds its own trimming as the checkpoint does."""
        published = self._stores[0].publish_checkpoint(gateway_id, upto, chunks, rows)
        if published:
            for store in self._stores[1:]:
                store.publish_checkpoint(gateway_id, upto, 0, 0)
        return published

    # -- what the lake's jobs write back ------------------------------------------------------
    def mark_flushed(self, position: int) -> None:
        """Mark every store flushed through ``position`` (one position in all of them)."""
        for store in self._stores:
            store.mark_flushed(position)

    def trim_log(self, gateway_id: str, upto: int, limit: int = 10_000) -> int:
        """Trim each store through ``upto`` (each at most ``limit``)."""
        return sum(store.trim_log(gateway_id, upto, limit) for store in self._stores)

    # -- rows by key ------------------------------------------------------------------------------
    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """Each row from its own store."""
        found: dict[RowKey, RowRecord] = {}
        for i, mine in self._by_store(keys).items():
            found.update(self._stores[i].read_rows(gateway_id, mine))
        return found

    def row_ids(self, gateway_id: str, table: str, after: str | None, limit: int) -> list[str]:
        """The table's row ids, from the store holding it."""
        return self._stores[self._index(table)].row_ids(gateway_id, table, after, limit)

    # -- coordination (leaders and mutexes in the default store) ----------------------------------
    def listen(self, callback: Callable[[LogNotice], None]) -> None:
        """Every store's notices of other processes' appends (their positions are ingest HLCs of
        the one order; a reader serves them up to the bound)."""
        for store in self._stores:
            store.listen(callback)

    def lead(self, role: str) -> bool:
        """See :meth:`~lakesync.hotlog.ports.Coordination.lead` (held in the default store)."""
        return self._stores[0].lead(role)

    def exclusive(self, name: str) -> AbstractContextManager[object]:
        """See :meth:`~lakesync.hotlog.ports.Coordination.exclusive` (the default store's)."""
        return self._stores[0].exclusive(name)

    # -- where the log stands -------------------------------------------------------------------
    def ping(self) -> None:
        """Raise the first store's error if any store cannot be reached."""
        for store in self._stores:
            store.ping()

    def head(self) -> int:
        """The visible bound: no position past it is served."""
        return self.bound()

    def flushed_position(self) -> int:
        """The least flushed position of the stores (a flush marks them all in turn)."""
        return min(s.flushed_position() for s in self._stores)

    def unflushed_bytes(self) -> int:
        """What waits to land, in every store together; a store that is down counts nothing
        (it takes no push either: the push backpressure guards goes to the others)."""
        total = 0
        for store in self._stores:
            try:
                total += store.unflushed_bytes()
            except Exception as exc:
                if not is_store_outage(exc):
                    raise
        return total

    def trimmed_through(self, gateway_id: str) -> int:
        """The greatest horizon of the stores: a cursor below any store's horizon missed what
        that store deleted."""
        return max(s.trimmed_through(gateway_id) for s in self._stores)

    def read_log(self, after: int, limit: int, gateway_id: str | None = None) -> list[LogEntry]:
        """Every store's entries after ``after`` up to the bound, merged by ingest HLC (a
        batch ends at an HLC boundary, so the next one resumes after its last entry)."""
        bound = self.bound()
        if after >= bound:
            return []
        reads = [s.read_log(after, limit + 1, gateway_id) for s in self._stores]
        return merge_pages([clip(r, bound, limit) for r in reads], limit)[0]

    # -- rules and documents (the default store) ------------------------------------------------
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """No rules (rules are not served across stores); refused if the default store holds
        some, rather than serving rows they would hide."""
        record = self._stores[0].get_rules(gateway_id)
        if record.rules is not None:
            raise ConfigError(f"gateway {gateway_id!r}: {_NO_RULES}")
        return RulesRecord(None, 0)

    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """Refused for rules (see :meth:`get_rules`); clearing them is allowed."""
        if rules is not None:
            raise ConfigError(f"gateway {gateway_id!r}: {_NO_RULES}")
        self._stores[0].set_rules(gateway_id, None)
        return RulesRecord(None, 0)

    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.put_doc` (the default store)."""
        self._stores[0].put_doc(gateway_id, kind, name, body)

    def update_doc(
        self,
        gateway_id: str,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any]],
    ) -> dict[str, Any]:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.update_doc` (the default store)."""
        return self._stores[0].update_doc(gateway_id, kind, name, change)

    def list_docs(self, gateway_id: str, kind: str) -> dict[str, dict[str, Any]]:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.list_docs` (the default store)."""
        return self._stores[0].list_docs(gateway_id, kind)

    def docs_of_kind(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.docs_of_kind` (the default store)."""
        return self._stores[0].docs_of_kind(kind)

    def delete_doc(self, gateway_id: str, kind: str, name: str) -> bool:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.delete_doc` (the default store)."""
        return self._stores[0].delete_doc(gateway_id, kind, name)

    def delete_docs(
        self, gateway_id: str, kind: str, expired: Callable[[dict[str, Any]], bool]
    ) -> int:
        """See :meth:`~lakesync.hotlog.ports.DocumentStore.delete_docs` (the default store)."""
        return self._stores[0].delete_docs(gateway_id, kind, expired)

    def close(self) -> None:
        """Close every store (each is closed even if another fails; the first error is raised)."""
        errors: list[Exception] = []
        for store in self._stores:
            try:
                store.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def open_hot_log(
    url: str,
    shards: Sequence[ShardSpec],
    data_dir: Path,
    clock: HLC,
    pg_schema: str = "lakesync",
    limits: StoreConfig = StoreConfig(),  # noqa: B008 (frozen: one shared default is safe)
) -> HotLog:
    """The gateway's hot log: the store ``url`` names (:func:`~lakesync.hotlog.factory.
    open_store`) or, with ``shards``, every shard's store served as one (:func:`open_sharded`)."""
    if not shards:
        return open_store(url, data_dir, clock, pg_schema, limits)
    return open_sharded(url, shards, data_dir, clock, pg_schema, limits)


def open_sharded(
    url: str,
    shards: Sequence[ShardSpec],
    data_dir: Path,
    clock: HLC,
    pg_schema: str = "lakesync",
    limits: StoreConfig = StoreConfig(),  # noqa: B008 (frozen: one shared default is safe)
) -> ShardedHotLog:
    """Open the default store ``url`` and each shard's store (as
    :func:`~lakesync.hotlog.factory.open_store` does; a shard's ``sqlite`` is its own file in
    ``data_dir``) on one clock. A store that cannot be opened, or that is another's, is an
    error naming the shard; the stores already open are closed."""
    opened: list[HotLog] = []
    where = {_location(url, DEFAULT_SHARD, data_dir): DEFAULT_SHARD}
    try:
        opened.append(open_store(url, data_dir, clock, pg_schema, limits))
        for shard in shards:
            location = _location(shard.store_url, shard.name, data_dir)
            if location in where:
                raise ConfigError(f"shard {shard.name!r}: its store_url is shard "
                                  f"{where[location]!r}'s store (each shard needs its own)")
            where[location] = shard.name
            own = location if location.startswith("sqlite:///") else shard.store_url
            opened.append(_open_shard(shard, own, data_dir, clock, pg_schema, limits))
        return ShardedHotLog(opened, shards)
    except BaseException:
        for store in opened:
            store.close()
        raise


def _location(url: str, name: str, data_dir: Path) -> str:
    """Where a store URL keeps its data, one text per store: an embedded store as
    ``sqlite:///`` and its absolute path (a shard's bare ``sqlite`` is its own file in
    ``data_dir``), another URL as it is."""
    if url == "sqlite":
        path = data_dir / ("hotlog.sqlite3" if name == DEFAULT_SHARD else f"hotlog-{name}.sqlite3")
    elif url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
    else:
        return url
    return f"sqlite:///{path.resolve()}"


def _open_shard(
    shard: ShardSpec, url: str, data_dir: Path, clock: HLC, pg_schema: str, limits: StoreConfig
) -> HotLog:
    try:
        return open_store(url, data_dir, clock, pg_schema, limits)
    except ConfigError as exc:
        raise ConfigError(f"shard {shard.name!r}: {exc.message}") from None
    except Exception as exc:
        # The same failure (an outage stays an outage), saying which shard's store it is.
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        try:
            named = type(exc)(f"shard {shard.name!r}: {first}")
        except TypeError:
            raise exc from None
        raise named from exc
