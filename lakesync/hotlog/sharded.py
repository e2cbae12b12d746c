"""A deployment's tables spread over several hot-log stores, served as one store.

:class:`ShardedHotLog` is a :class:`~lakesync.hotlog.base.HotLog` over one store per shard
(:mod:`lakesync.shard_specs`), opened by :func:`open_sharded`: the default store holds every
table no shard lists, the gateways' documents, leaders and mutexes. Its positions (``after``,
``head``, an entry's ``ingest_hlc``) are cursors of :mod:`lakesync.cursors`, holding a position
in each store, so its callers page through it as through one store:

- a push is split by table and each store appends its part (skipping the deltaIds it already
  holds, as every store does); it is acknowledged once every part is durable, and a part that
  fails fails the push with that store's error (an outage: retryable), so the client's retry
  lands each delta once: the stores that kept their part skip it;
- a page reads each store after its own position and merges the entries by ingest HLC (the
  stores share one clock); each entry's position is the cursor after it, so a page cut at
  ``limit`` resumes exactly where it stopped, and ``has_more`` says whether any store has more.
  A store that fails fails the read: no store is silently left out.

An entry returned by :meth:`ShardedHotLog.append` (or a notice of another process's append) is
placed at its own store's position and 0 in the others: a cursor that holds it is behind in the
other stores (read again, never skipped).

Not served across stores yet, and refused rather than served wrong: sync rules (setting them,
or a gateway whose default store holds some: a client would see rows they hide) and building
checkpoints (none is served: a fresh client pulls from 0). A cursor of several stores exceeds
64 bits, which WebSocket frames and the Python client's replica do not hold: the gateway does not
serve this store yet (``lakesync up`` refuses ``shards:``).
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any

from lakesync import cursors
from lakesync.delta import RowDelta
from lakesync.errors import ConfigError
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

__all__ = ["ShardedHotLog", "merge_pages", "open_sharded"]

_NO_CHECKPOINTS = "checkpoints are not built on a sharded hot log yet"
_NO_RULES = "sync rules are not served on a sharded hot log yet; remove shards: or the rules"


def merge_pages(
    positions: Sequence[int],
    pages: Sequence[tuple[Sequence[LogEntry], bool]],
    limit: int,
) -> tuple[list[LogEntry], tuple[int, ...], bool]:
    """Merge one page per store into one page of at most ``limit`` entries, oldest ingest HLC
    first (ties by store order). ``positions`` are the stores' cursors the pages were read
    after, ``pages`` each store's entries (ingest order) and whether it has more. Returns the
    entries placed at the cursor after each (:mod:`lakesync.cursors`), the stores' positions
    after the last one taken, and whether any store holds more. Pure."""
    at = list(positions)
    merged = heapq.merge(
        *[[(e.ingest_hlc, i, e) for e in entries] for i, (entries, _) in enumerate(pages)]
    )
    taken: list[LogEntry] = []
    for ingest, store, entry in merged:
        if len(taken) == limit:
            return taken, tuple(at), True
        at[store] = ingest
        taken.append(entry._replace(ingest_hlc=cursors.encode(at)))
    return taken, tuple(at), any(more for _, more in pages)


class ShardedHotLog(HotLog):
    """One store per shard served as one (see the module): pushes split by table, pages merged
    by ingest HLC, positions that are cursors across the stores. ``stores`` are the default
    store then one per shard of ``shards``, in that order, all sharing one clock."""

    def __init__(self, stores: Sequence[HotLog], shards: Sequence[ShardSpec]) -> None:
        if len(stores) != len(shards) + 1:
            raise ValueError("one store for the default shard and one per shard")
        if any(s.clock is not stores[0].clock for s in stores):
            raise ValueError("the stores must share one clock (ingest HLCs are merged)")
        super().__init__(stores[0].clock)
        self._stores = list(stores)
        self.names = [DEFAULT_SHARD, *(s.name for s in shards)]
        self._route = {t: i for i, s in enumerate(shards, start=1) for t in s.tables}
        self._heads = [0 for _ in stores]
        self._heads_lock = threading.Lock()

    def _seen(self, heads: Mapping[int, int]) -> list[int]:
        """Note the stores' ``heads`` just read; every store's latest head known. A push reply
        names the head of the stores it did not touch without asking them (one may be down)."""
        with self._heads_lock:
            for i, head in heads.items():
                self._heads[i] = max(self._heads[i], head)
            return list(self._heads)

    @property
    def stores(self) -> Mapping[str, HotLog]:
        """Each shard's store by shard name, the default store first."""
        return dict(zip(self.names, self._stores, strict=True))

    def _index(self, table: str) -> int:
        return self._route.get(table, 0)

    def _positions(self, value: int, field: str = "since") -> tuple[int, ...]:
        return cursors.decode(value, len(self._stores), field)

    def _at(self, store: int, position: int) -> int:
        """The cursor at ``position`` in one store and 0 in the others."""
        return cursors.encode([*(0 for _ in range(store)), position])

    # -- the push path --------------------------------------------------------------------------
    def append(
        self, gateway_id: str, deltas: Sequence[RowDelta], check: WriteCheck | None = None
    ) -> AppendResult:
        """Store a push: each store its tables' part, durably; see the module for failures."""
        parts: dict[int, list[RowDelta]] = {}
        for delta in deltas:
            parts.setdefault(self._index(delta.table), []).append(delta)
        results = {i: self._stores[i].append(gateway_id, part, check) for i, part in parts.items()}
        heads = self._seen({i: r.head for i, r in results.items()})
        # In ingest order across the stores (they share one clock), ties in store order.
        ordered = sorted((e.ingest_hlc, i, e) for i, r in results.items() for e in r.stored)
        stored = [e._replace(ingest_hlc=self._at(i, at)) for at, i, e in ordered]
        rows: dict[RowKey, RowRecord] = {}
        before: dict[RowKey, RowState] = {}
        for r in results.values():
            rows.update(r.rows)
            before.update(r.before)
        # What the append was judged under, as this store serves it (:meth:`get_rules`).
        rules = RulesRecord(None, 0) if stored else None
        return AppendResult(
            stored=stored,
            accepted=sum(r.accepted for r in results.values()),
            head=cursors.encode(heads),
            rows=rows,
            before=before,
            rules=rules,
        )

    # -- the pull path --------------------------------------------------------------------------
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """Each store's entries after its own position, merged (see :func:`merge_pages`)."""
        positions = self._positions(after)
        pages = [
            store.read_page(gateway_id, at, limit, with_rows)
            for store, at in zip(self._stores, positions, strict=True)
        ]
        entries, _, more = merge_pages(
            positions, [(p.entries, p.has_more) for p in pages], limit
        )
        return self._merged(pages, entries, more)

    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """Each store's entries in its own range, merged."""
        lows, highs = self._positions(after), self._positions(upto, "upto")
        pages = [
            store.read_range(gateway_id, low, high)
            for store, low, high in zip(self._stores, lows, highs, strict=True)
        ]
        entries, _, _ = merge_pages(
            lows, [(p.entries, False) for p in pages], sum(len(p.entries) for p in pages)
        )
        return self._merged(pages, entries, False)

    def _merged(self, pages: Sequence[Page], entries: list[LogEntry], more: bool) -> Page:
        """One page of the merged ``entries``, the rows they touch and the stores' heads."""
        keys = {(e.delta.table, e.delta.row_id) for e in entries}
        rows = {k: v for p in pages for k, v in p.rows.items() if k in keys}
        heads = self._seen(dict(enumerate(p.head for p in pages)))
        return Page(entries, rows, cursors.encode(heads), more)

    def read_all_rows(self, gateway_id: str) -> Page:
        """Every store's rows of the gateway, and the stores' heads."""
        pages = [store.read_all_rows(gateway_id) for store in self._stores]
        rows = {k: v for p in pages for k, v in p.rows.items()}
        heads = self._seen(dict(enumerate(p.head for p in pages)))
        return Page([], rows, cursors.encode(heads), False)

    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """Not served across stores (only rules ask for it): every row is read instead."""
        return None

    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int
    ) -> dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]]:
        """Each row's history from its own store, between that store's positions."""
        lows, highs = self._positions(since), self._positions(upto, "upto")
        out: dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]] = {}
        for i, mine in self._by_store(keys).items():
            found = self._stores[i].row_history(gateway_id, mine, lows[i], highs[i])
            for key, (state, later) in found.items():
                out[key] = (state, [(self._at(i, at), d) for at, d in later])
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
        """The client's claims stamp, kept in the default store (a cursor in the others' 0)."""
        return self._stores[0].view_stamp(gateway_id, client_id, claims_hash, claims)

    def view_history(
        self, gateway_id: str, client_id: str, since: int
    ) -> tuple[list[tuple[int, SyncRules | None]], list[tuple[int, dict[str, Any]]]]:
        """The client's view history, kept in the default store."""
        own = self._positions(since)[0]
        return self._stores[0].view_history(gateway_id, client_id, own)

    # -- the initial sync -----------------------------------------------------------------------
    def checkpoint(self, gateway_id: str) -> CheckpointInfo | None:
        """No checkpoint is served across stores yet: a fresh client pulls from 0."""
        return None

    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        """No checkpoint is served across stores yet."""
        return None

    def stage_checkpoint_chunk(self, gateway_id: str, upto: int, seq: int, body: bytes) -> None:
        """Refused: checkpoints are not built across stores yet."""
        raise ConfigError(_NO_CHECKPOINTS)

    def publish_checkpoint(self, gateway_id: str, upto: int, chunks: int, rows: int) -> bool:
        """Refused: checkpoints are not built across stores yet."""
        raise ConfigError(_NO_CHECKPOINTS)

    # -- what the lake's jobs write back ------------------------------------------------------
    def mark_flushed(self, position: int) -> None:
        """Mark each store flushed through its own position in the cursor ``position``."""
        for store, at in zip(self._stores, self._positions(position, "position"), strict=True):
            store.mark_flushed(at)

    def trim_log(self, gateway_id: str, upto: int, limit: int = 10_000) -> int:
        """Trim each store through its own position in ``upto`` (each at most ``limit``)."""
        positions = self._positions(upto, "upto")
        return sum(
            store.trim_log(gateway_id, at, limit)
            for store, at in zip(self._stores, positions, strict=True)
        )

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
        """Every store's notices, their positions as cursors (0 in the other stores)."""
        for i, store in enumerate(self._stores):
            store.listen(partial(self._relay, i, callback))

    def _relay(self, store: int, callback: Callable[[LogNotice], None], notice: LogNotice) -> None:
        callback(
            notice._replace(after=self._at(store, notice.after), upto=self._at(store, notice.upto))
        )

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
        """Every store's head, as one cursor."""
        return cursors.encode([s.head() for s in self._stores])

    def flushed_position(self) -> int:
        """Every store's flushed position, as one cursor."""
        return cursors.encode([s.flushed_position() for s in self._stores])

    def unflushed_bytes(self) -> int:
        """What waits to land, in every store together."""
        return sum(s.unflushed_bytes() for s in self._stores)

    def trimmed_through(self, gateway_id: str) -> int:
        """Every store's horizon for the gateway, as one cursor."""
        return cursors.encode([s.trimmed_through(gateway_id) for s in self._stores])

    def read_log(self, after: int, limit: int, gateway_id: str | None = None) -> list[LogEntry]:
        """Every store's entries after its own position, merged by ingest HLC."""
        positions = self._positions(after, "after")
        reads = [
            store.read_log(at, limit + 1, gateway_id)
            for store, at in zip(self._stores, positions, strict=True)
        ]
        pages = [(entries[:limit], len(entries) > limit) for entries in reads]
        return merge_pages(positions, pages, limit)[0]

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



def open_sharded(
    url: str, shards: Sequence[ShardSpec], data_dir: Path, clock: HLC, pg_schema: str = "lakesync"
) -> ShardedHotLog:
    """Open the default store ``url`` and each shard's store (as
    :func:`~lakesync.hotlog.factory.open_store` does; a shard's ``sqlite`` is its own file in
    ``data_dir``) on one clock. A store that cannot be opened, or that is another's, is an
    error naming the shard; the stores already open are closed."""
    opened: list[HotLog] = []
    where = {_location(url, DEFAULT_SHARD, data_dir): DEFAULT_SHARD}
    try:
        opened.append(open_store(url, data_dir, clock, pg_schema))
        for shard in shards:
            location = _location(shard.store_url, shard.name, data_dir)
            if location in where:
                raise ConfigError(f"shard {shard.name!r}: its store_url is shard "
                                  f"{where[location]!r}'s store (each shard needs its own)")
            where[location] = shard.name
            own = location if location.startswith("sqlite:///") else shard.store_url
            opened.append(_open_shard(shard, own, data_dir, clock, pg_schema))
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
    shard: ShardSpec, url: str, data_dir: Path, clock: HLC, pg_schema: str
) -> HotLog:
    try:
        return open_store(url, data_dir, clock, pg_schema)
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
