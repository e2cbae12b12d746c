"""The chaos suite's pure parts: the schedule replays from its seed, the checks find what they
look for."""

from __future__ import annotations

import itertools
from collections import Counter

from lakesync.merge import merge_state
from tests.api.helpers import delta
from tests.chaos.checks import differences, longest_stall, lost_and_duplicated, outside_view
from tests.chaos.schedule import GATEWAY_FAULTS, KINDS, SKEWS, fault_counts, make_schedule
from tests.chaos.test_chaos_short import SECONDS, SEED


def test_a_seed_replays_its_schedule_and_another_seed_differs() -> None:
    assert make_schedule(7, 600) == make_schedule(7, 600)
    assert make_schedule(7, 600) != make_schedule(8, 600)


def test_faults_follow_each_other_within_the_run_and_their_ranges() -> None:
    faults = make_schedule(3, 1800, gateways=3, clients=2, pushers=4)
    assert len(faults) >= 100  # a 30-minute run holds the hundred faults asked of it
    assert set(fault_counts(faults)) == set(KINDS)
    for before, after in itertools.pairwise(faults):
        assert before.end < after.t  # one fault at a time
    for f in faults:
        low, high = KINDS[f.kind]
        assert low <= f.duration <= high and f.end <= 1800
        limit = {"client_kill": 2, "client_skew": 2, "skew": 4}.get(f.kind, 3)
        assert 0 <= f.target < limit
        assert (f.arg > 0) == (f.kind in SKEWS)
    assert set(KINDS) >= GATEWAY_FAULTS


def test_lost_and_duplicated_deltas_are_named() -> None:
    stored = Counter({"a": 1, "b": 2, "x": 1})
    assert lost_and_duplicated({"a", "b", "c"}, stored) == ({"c"}, {"b"})


def test_a_state_differs_from_the_reference_merge_by_row() -> None:
    first = delta("INSERT", "r1", "c1", hlc=1 << 16, team="red", v=1)
    later = delta("UPDATE", "r1", "c2", hlc=2 << 16, v=2)
    reference = merge_state([first, later])
    assert differences(reference, merge_state([later, first])) == []
    lines = differences(reference, merge_state([first]))
    assert len(lines) == 1 and "('todos', 'r1')" in lines[0]
    assert outside_view(reference, "team", "red") == []
    assert outside_view(reference, "team", "blue") == [("todos", "r1")]


def test_the_longest_stall_is_measured_inside_the_windows_only() -> None:
    acks = [0.0, 1.0, 2.0, 9.0, 10.0, 10.5]
    # Window 1.5..9.5: acks at 2 and 9, so the gap 2 → 9 (7 s); the gap 10.5 → 20 is outside.
    assert longest_stall(acks, [(1.5, 9.5)]) == 7.0
    assert longest_stall(acks, [(11.0, 12.0)]) == 1.0  # no ack at all: the whole window
    assert longest_stall(acks, []) == 0.0


def test_the_short_runs_seed_holds_every_kind_of_fault() -> None:
    assert {f.kind for f in make_schedule(SEED, SECONDS)} == set(KINDS)
