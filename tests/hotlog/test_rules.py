"""The RulesStore port's behaviour suite: a gateway's sync rules with a fresh ingest stamp per
change; run on every store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

from lakesync.hotlog.base import HotLog
from tests.hotlog.common import RULES, another, d


def test_rules_persist_with_a_fresh_stamp_per_change(store: HotLog) -> None:
    assert store.get_rules("gw1").rules is None and store.get_rules("gw1").stamp == 0
    head = store.append("gw1", [d("INSERT", "a", 1, x=1)]).head
    first = store.set_rules("gw1", RULES)
    assert first.stamp > head and store.get_rules("gw1") == first
    assert store.set_rules("gw1", RULES) == first  # unchanged: same stamp
    cleared = store.set_rules("gw1", None)
    assert cleared.rules is None and cleared.stamp > first.stamp
    assert store.get_rules("gw2").stamp == 0
    later = store.append("gw1", [d("INSERT", "b", 2, x=1)])
    assert later.stored[0].ingest_hlc > cleared.stamp


def test_rules_and_their_stamp_outlive_the_process(store: HotLog) -> None:
    first = store.set_rules("gw1", RULES)
    store.close()
    again = another(store)
    try:
        assert again.get_rules("gw1") == first
        assert again.set_rules("gw1", RULES) == first  # unchanged: the same stamp
        assert again.set_rules("gw1", None).stamp > first.stamp
    finally:
        again.close()
