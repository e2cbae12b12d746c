"""A fault schedule as a pure function of a seed: the same seed, duration and topology give the
same faults at the same offsets, so a failed run replays.

Faults follow each other (one at a time, with a quiet gap between them), so "only one process
faulted" is a property of the schedule, not of luck; a fault's ``duration`` is how long it lasts
before it heals (a killed process is restarted, a frozen one continued, a cut proxy thawed,
PostgreSQL started again, a skewed clock set right).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

__all__ = ["GATEWAY_FAULTS", "KINDS", "SKEWS", "Fault", "fault_counts", "make_schedule"]

GATEWAY_FAULTS = frozenset({"kill", "pause", "cut_pg", "cut_clients"})
"""Faults of one gateway process (the others should keep acknowledging writes)."""

KINDS: dict[str, tuple[float, float]] = {
    "kill": (1.0, 4.0),  # SIGKILL, restarted after the duration
    "pause": (2.0, 8.0),  # SIGSTOP, SIGCONT after the duration
    "cut_pg": (2.0, 8.0),  # the gateway's proxy to PostgreSQL frozen
    "cut_clients": (2.0, 8.0),  # the proxy in front of the gateway frozen for clients
    "pg_fast": (0.5, 3.0),  # pg_ctl stop -m fast, started again after the duration
    "pg_immediate": (0.5, 3.0),  # pg_ctl stop -m immediate (a crash), likewise
    "client_kill": (0.5, 3.0),  # a library client's process SIGKILLed, restarted after
    "skew": (5.0, 20.0),  # a raw pusher's clock set minutes back
    "client_skew": (5.0, 20.0),  # a library client's wall clock set minutes back
    "disk_full": (2.0, 8.0),  # the lake's warehouse disk filled up, freed after the duration
}
"""Each fault kind and the range its duration is drawn from, in seconds."""

_WEIGHTS = {"kill": 3, "pause": 3, "cut_pg": 3, "cut_clients": 2, "pg_fast": 1,
            "pg_immediate": 1, "client_kill": 2, "skew": 1, "client_skew": 1, "disk_full": 1}

SKEWS = frozenset({"skew", "client_skew"})
"""Faults that set a clock back (by ``arg`` minutes)."""


@dataclass(frozen=True)
class Fault:
    """One fault: at ``t`` seconds into the run, ``kind`` hits ``target`` (a gateway, client or
    pusher index; 0 for PostgreSQL and the disk) for ``duration`` seconds; ``arg`` is the clock
    skew in minutes for the kinds of :data:`SKEWS` (0 otherwise)."""

    t: float
    kind: str
    target: int
    duration: float
    arg: int = 0

    @property
    def end(self) -> float:
        """When the fault heals, in seconds into the run."""
        return self.t + self.duration


def make_schedule(
    seed: int, duration: float, *, gateways: int = 3, clients: int = 2, pushers: int = 4,
    start: float = 5.0, gap: tuple[float, float] = (1.0, 4.0),
) -> list[Fault]:
    """The faults of a run of ``duration`` seconds: the first at ``start``, each next one a
    random ``gap`` after the previous one healed, the last healed by ``duration``."""
    rng = random.Random(seed)
    kinds = sorted(_WEIGHTS)
    weights = [_WEIGHTS[k] for k in kinds]
    faults: list[Fault] = []
    t = start
    while True:
        kind = rng.choices(kinds, weights)[0]
        low, high = KINDS[kind]
        length = round(rng.uniform(low, high), 2)
        if t + length > duration:
            return faults
        count = {"client_kill": clients, "client_skew": clients, "skew": pushers}.get(
            kind, gateways)
        target = 0 if kind.startswith("pg_") or kind == "disk_full" else rng.randrange(count)
        arg = rng.randint(1, 10) if kind in SKEWS else 0
        faults.append(Fault(round(t, 2), kind, target, length, arg))
        t += length + rng.uniform(*gap)


def fault_counts(faults: list[Fault]) -> dict[str, int]:
    """How many faults of each kind, for the run's figures."""
    return dict(sorted(Counter(f.kind for f in faults).items()))
