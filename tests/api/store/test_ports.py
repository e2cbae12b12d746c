"""The ports split the whole store: every public member of :class:`HotLog` belongs to exactly one
port (or is its lifecycle), so a new store method has to be placed in the port its consumers use."""

from __future__ import annotations

import inspect

from lakesync.api.store.base import HotLog
from lakesync.api.store.ports import (
    CheckpointStore,
    Coordination,
    DeltaLog,
    DocumentStore,
    HotLogSource,
    RowStore,
    RulesStore,
    SyncStore,
    ViewHistoryStore,
)

PORTS = [DeltaLog, RowStore, RulesStore, DocumentStore, ViewHistoryStore, CheckpointStore]


def _own(cls: type) -> set[str]:
    """The public members a class declares itself (methods and annotated attributes)."""
    names = set(vars(cls)) | set(vars(cls).get("__annotations__", {}))
    return {n for n in names if not n.startswith("_")}


def test_every_store_member_is_in_one_port() -> None:
    owned = [_own(p) for p in PORTS] + [_own(HotLogSource), _own(Coordination), _own(SyncStore)]
    assert sum(map(len, owned)) == len(set().union(*owned)), "a member is in two ports"
    public = {n for n, _ in inspect.getmembers(HotLog) if not n.startswith("_")} | {"clock"}
    assert public - {"close"} == set().union(*owned)
    assert _own(HotLogSource) == {"read_log"} and HotLogSource in DeltaLog.__mro__
