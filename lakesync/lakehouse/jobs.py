"""The lake's jobs, declared once: what each needs, when it runs, whether it needs the leader.

Every job the lake runs next to a gateway or from the command line is one :class:`JobSpec` in
:data:`JOBS`; the scheduler (:class:`~lakesync.lakehouse.runtime.LakeRuntime`) runs the
scheduled ones, and the command line hands the others to a running gateway
(:mod:`lakesync.cli.handover`) or runs them in its own process. Pure data: no I/O here.

===========  ============================  ===================  ==========  ===========
job          what it is                    interval setting     leader      where
===========  ============================  ===================  ==========  ===========
flush        hot log → landing table       ``flush_interval``   landing     gateway
checkpoint   checkpoints from the lake     ``flush_interval``   checkpoint  gateway
trim         hot log trimmed               ``flush_interval``   checkpoint  gateway
build        ``lakesync pipeline run``     ``pipeline_...``     pipeline    warm worker
ship         ``lakesync materialise``      (asked only)         pipeline    warm worker
compact      ``lakesync compact``          ``compaction_...``   pipeline    warm worker
tier         ``materialise --lifecycle-``  (asked only)         (none)      this process
===========  ============================  ===================  ==========  ===========
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["JOBS", "JobName", "JobSpec", "Need", "job_of_kind"]

JobName = Literal["flush", "build", "ship", "tier", "checkpoint", "trim", "compact"]
"""A lake job's name."""

Need = Literal["hot_log", "catalog", "spark", "dbt", "destinations"]
"""What a job reaches: the gateway's hot log, the Iceberg catalog, a Spark session, dbt, the
declared destinations."""

IntervalSetting = Literal["flush_interval", "pipeline_interval", "compaction_interval"]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One lake job: its name, what it needs, the setting that schedules it (None: it runs only
    when asked), the leadership role a process must hold to run it (None: any process may), and
    its kind on the warm worker's protocol (None: it runs in the gateway's or the command's own
    process, no Spark).

    ``title`` names it in logs and in the ``queued`` event (``pipeline run``); ``at_start``
    runs it as soon as its process leads (else it waits one interval first)."""

    name: JobName
    title: str
    needs: frozenset[Need]
    interval: IntervalSetting | None
    leader: str | None
    worker_kind: Literal["pipeline", "compact", "materialise"] | None = None
    at_start: bool = False

    @property
    def on_worker(self) -> bool:
        """Whether the job runs on the warm worker (Spark stays out of the gateway process);
        those are the jobs a command hands to a running gateway."""
        return self.worker_kind is not None


JOBS: dict[JobName, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec("flush", "landing flush", frozenset({"hot_log", "catalog"}), "flush_interval",
                "landing", at_start=True),
        JobSpec("checkpoint", "checkpoints", frozenset({"hot_log", "catalog"}),
                "flush_interval", "checkpoint"),
        JobSpec("trim", "hot-log trimming", frozenset({"hot_log", "catalog"}), "flush_interval",
                "checkpoint"),
        JobSpec("build", "pipeline run",
                frozenset({"catalog", "spark", "dbt", "destinations"}), "pipeline_interval",
                "pipeline", "pipeline"),
        JobSpec("ship", "materialise", frozenset({"catalog", "spark", "dbt", "destinations"}),
                None, "pipeline", "materialise"),
        JobSpec("compact", "compaction", frozenset({"catalog", "spark", "dbt"}),
                "compaction_interval", "pipeline", "compact"),
        JobSpec("tier", "lifecycle", frozenset({"destinations"}), None, None),
    )
}
"""Every lake job, by name."""


def job_of_kind(kind: str) -> JobSpec:
    """The job the warm worker's protocol calls ``kind`` (``pipeline``, ``compact``,
    ``materialise``); raises :class:`KeyError` for any other."""
    for spec in JOBS.values():
        if spec.worker_kind == kind:
            return spec
    raise KeyError(kind)
