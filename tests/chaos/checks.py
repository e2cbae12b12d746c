"""The invariants of a chaos run as pure functions over what the run recorded: acknowledged
deltas, what the hot log holds, each process's and replica's state, the acknowledgement times.

The reference state is :func:`lakesync.merge.merge_state` of the acknowledged deltas: the same
merge the gateway and the client run, not a second copy of last-writer-wins.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

__all__ = ["Rows", "differences", "longest_stall", "lost_and_duplicated", "outside_view"]

Rows = Mapping[tuple[str, str], Mapping[str, Any]]
"""Live rows by ``(table, row_id)``: what :func:`lakesync.merge.merge_state` returns."""


def lost_and_duplicated(
    acked: Collection[str], stored: Counter[str]
) -> tuple[set[str], set[str]]:
    """The acknowledged delta ids the hot log lacks, and the ids it holds more than once."""
    return {d for d in acked if stored[d] == 0}, {d for d, n in stored.items() if n > 1}


def differences(expected: Rows, actual: Rows, limit: int = 5) -> list[str]:
    """How ``actual`` differs from ``expected``: at most ``limit`` lines, empty when equal."""
    out: list[str] = []
    for key in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(key), actual.get(key)
        if want != got:
            out.append(f"{key}: expected {want}, got {got}")
            if len(out) == limit:
                break
    return out


def outside_view(rows: Rows, column: str, value: str) -> list[tuple[str, str]]:
    """The rows whose ``column`` is not ``value``: a replica bound to that view must hold none."""
    return sorted(key for key, row in rows.items() if row.get(column) != value)


def longest_stall(acks: Iterable[float], windows: Iterable[tuple[float, float]]) -> float:
    """The longest time inside any of ``windows`` (``(start, end)``, e.g. while one process is
    faulted) with no acknowledgement: the gaps between the window's edges and the ``acks``
    (times, on the windows' clock) that fall inside it."""
    times = sorted(acks)
    longest = 0.0
    for start, end in windows:
        points = [start, *(t for t in times if start < t < end), end]
        longest = max(longest, *(b - a for a, b in itertools.pairwise(points)))
    return longest
