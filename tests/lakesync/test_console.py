"""The console's samples (pure): a lag is 0 when nothing waits, so a chart draws it from the
first sample, and unknown (None) when it could not be read; rates need a sample before."""

from __future__ import annotations

from lakesync.console import Counts, History
from lakesync.status import (
    Backlog,
    DestinationStatus,
    GatewayStatus,
    HotLogStatus,
    LandingStatus,
    PipelineStatus,
)


def _status(landing: Backlog) -> GatewayStatus:
    return GatewayStatus(
        "shop",
        HotLogStatus(0, False, 0, "0", None),
        LandingStatus(None, "0", landing),
        PipelineStatus(False, [], None, Backlog()),
        [
            DestinationStatus("idle", "postgres", [], Backlog()),
            DestinationStatus("busy", "postgres", [], Backlog(3, False, 12.5)),
            DestinationStatus("gone", "postgres", [], Backlog(), error="refused"),
        ],
        [], [], [],
    )


def test_a_lag_is_zero_when_nothing_waits_and_unknown_when_unread() -> None:
    history = History(keep_s=60, every_s=5)
    first = history.add(1000.0, Counts(1, 0, 2), _status(Backlog()))
    assert first.landing_lag_s == 0.0
    assert first.destination_lag_s == {"idle": 0.0, "busy": 12.5, "gone": None}
    assert first.pipeline_lag_s is None  # no model holds anything yet
    assert (first.push_rate, first.delta_rate) == (0.0, 0.0)
    second = history.add(1005.0, Counts(3, 0, 12), _status(Backlog(1, False, 4.0)))
    assert second.landing_lag_s == 4.0
    assert (second.push_rate, second.delta_rate) == (0.4, 2.0)
