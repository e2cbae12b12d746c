"""The role ports split the whole store: every public member of :class:`HotLog` is declared in
exactly one role port (or is its lifecycle), so a new store method has to be placed in the port
of the role its consumers play; the consumers' intersections declare nothing of their own; and
the lakehouse declares no copy of a port."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from lakesync.hotlog import ports
from lakesync.hotlog.base import HotLog

ROLES = [
    ports.HotLogSource,
    ports.LogStatus,
    ports.PushLog,
    ports.PullLog,
    ports.LogMaintenance,
    ports.Checkpoints,
    ports.CheckpointServing,
    ports.CheckpointSink,
    ports.RulesStore,
    ports.DocumentStore,
    ports.RowLookup,
    ports.Coordination,
]
CONSUMERS = [ports.SyncStore, ports.LakeStore, ports.StatusStore, ports.AdminStore]
LAKEHOUSE = Path(__file__).resolve().parents[2] / "lakesync" / "lakehouse"


def _own(cls: type) -> set[str]:
    """The public members a class declares itself (methods and annotated attributes)."""
    names = set(vars(cls)) | set(vars(cls).get("__annotations__", {}))
    return {n for n in names if not n.startswith("_")}


def test_every_store_member_is_in_one_role_port() -> None:
    owned = [_own(p) for p in ROLES]
    assert sum(map(len, owned)) == len(set().union(*owned)), "a member is in two ports"
    public = {n for n, _ in inspect.getmembers(HotLog) if not n.startswith("_")} | {"clock"}
    assert public - {"close"} == set().union(*owned)
    assert set(ports.__all__) == {p.__name__ for p in ROLES + CONSUMERS}


def test_consumer_ports_only_combine_role_ports() -> None:
    for consumer in CONSUMERS:
        assert _own(consumer) == set(), consumer
        assert all(base in ROLES for base in consumer.__bases__[:-1]), consumer


def test_the_lakehouse_declares_no_copy_of_a_port() -> None:
    declared = {p.__name__ for p in ROLES + CONSUMERS}
    for path in LAKEHOUSE.glob("*.py"):
        classes = set(re.findall(r"^class (\w+)\(.*Protocol", path.read_text(), re.MULTILINE))
        assert not classes & declared, path.name
        methods = {m for p in ROLES for m in _own(p)}
        for name in re.findall(r"^class \w+\(.*Protocol\):\n((?:    .*\n|\n)*)", path.read_text(),
                               re.MULTILINE):
            assert not set(re.findall(r"    def (\w+)\(", name)) & methods, path.name
