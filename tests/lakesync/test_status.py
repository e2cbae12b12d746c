"""The status's pure parts: backlogs, the run history documents, client activity and the one
rule for "failing"."""

from __future__ import annotations

from datetime import UTC, datetime

from lakesync.hlc import encode
from lakesync.status import (
    RUNS_KEPT,
    Backlog,
    ClientActivity,
    ConnectorStatus,
    DestinationStatus,
    GatewayStatus,
    HotLogStatus,
    LandingStatus,
    PipelineRun,
    PipelineStatus,
    Shipment,
    backlog,
    connector_health,
    problems,
    record_run,
    record_shipments,
    reported_count,
    runs_of,
    shipment_fields,
)

NOW = 1_800_000_000.0


def _at(seconds_ago: float) -> int:
    return encode(int((NOW - seconds_ago) * 1000), 0)


def test_backlog_counts_after_a_position_and_ages_the_oldest() -> None:
    ingests = [_at(30), _at(20), _at(10)]
    assert backlog(ingests, 0, 100, NOW) == Backlog(3, False, 30.0)
    assert backlog(ingests, ingests[0], 100, NOW) == Backlog(2, False, 20.0)
    assert backlog(ingests, ingests[-1], 100, NOW) == Backlog()
    assert backlog(ingests, 0, 3, NOW).capped  # read as many as asked: there may be more


def test_the_pipeline_history_keeps_the_newest_runs_first() -> None:
    doc = None
    for i in range(RUNS_KEPT + 5):
        doc = record_run(doc, PipelineRun(datetime.fromtimestamp(NOW + i, UTC), 1.0, True,
                                          rows_merged=i))
    runs = runs_of(doc)
    assert len(runs) == RUNS_KEPT and runs[0].rows_merged == RUNS_KEPT + 4


def test_a_clean_shipment_clears_a_destinations_last_error() -> None:
    doc = record_shipments(None, [Shipment("wh", "a", 3), Shipment("wh", "b", error="down")], NOW)
    fields = shipment_fields(doc, "wh")
    assert fields["last_rows"] == 3 and fields["last_error"] == "b: down"
    doc = record_shipments(doc, [Shipment("wh", "a", 1), Shipment("wh", "b", 2)], NOW + 60)
    fields = shipment_fields(doc, "wh")
    assert fields["last_error"] is None and fields["last_rows"] == 3
    assert fields["last_error_at"] == datetime.fromtimestamp(NOW, UTC)  # when it last failed
    assert shipment_fields(doc, "other")["last_shipment_at"] is None


def test_a_connector_fails_until_a_poll_succeeds_after_its_error() -> None:
    failing = {"state": "idle", "last_error": "401", "last_error_at": NOW, "last_success": NOW - 9}
    assert connector_health("c", failing).failing
    assert not connector_health("c", failing | {"last_success": NOW + 1}).failing
    assert connector_health("c", failing | {"last_success": None}).failing
    assert not connector_health("c", {"state": "idle"}).failing


def test_clients_keep_their_last_report_and_the_most_recent_are_kept() -> None:
    activity = ClientActivity(per_gateway=2)
    activity.seen("gw", "a", NOW, outbox=5, dead_letters=1)
    activity.seen("gw", "a", NOW + 1)  # a request without a report keeps the last one
    activity.seen("gw", "b", NOW + 2)
    activity.seen("gw", "c", NOW + 3)  # "a" is the least recent: it goes
    clients = activity.clients("gw", {"b": 2, "z": 1})
    assert [(c.client_id, c.connections) for c in clients] == [("c", 0), ("b", 2), ("z", 1)]
    activity.seen("gw", "c", NOW + 4, outbox=0)
    assert activity.clients("gw", {})[0].pending_outbox == 0
    assert reported_count("12") == 12
    assert [reported_count(v) for v in (None, "", "-1", "1e3", "٣", "9" * 13)] == [None] * 6


def test_problems_name_each_failing_thing() -> None:
    when = datetime.fromtimestamp(NOW, UTC)
    gw = GatewayStatus(
        "shop",
        HotLogStatus(0, False, 0, "0", None),
        LandingStatus(None, "0", Backlog()),
        PipelineStatus(True, [PipelineRun(when, 1.0, False, "model x failed")], None, Backlog()),
        [
            DestinationStatus("wh", "postgres", [], Backlog(), error="refused"),
            DestinationStatus("bq", "bigquery", [], Backlog(), last_error="t: quota"),
            DestinationStatus("ok", "mysql", [], Backlog()),
        ],
        [ConnectorStatus("jira", "idle", when, 3, "401", when, True),
         ConnectorStatus("crm", "idle", when, 3, "old", when, False)],
        [],
        [],
    )
    assert problems(gw) == [
        "shop: destination wh unreachable: refused",
        "shop: destination bq last shipment failed: t: quota",
        "shop: connector jira failing: 401",
        "shop: last pipeline run failed: model x failed",
    ]
