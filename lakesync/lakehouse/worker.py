"""A warm pipeline: one long-lived process keeps its Spark session and dbt between runs.

``lakesync up`` with a pipeline interval starts ``python -m lakesync.lakehouse.worker --data-dir
D`` once
and asks it for each scheduled run over a pipe, so a run costs the work, not a JVM start, the
Iceberg catalog's warm-up and dbt's import (``bench/pipeline_warm_bench.py`` measures both). The
run itself is what ``lakesync pipeline run`` does: :func:`lakesync.lakehouse.pipeline.run_and_ship`
(the dbt build, then shipping when the configuration declares ``destinations:``; a run whose
shipping partly failed is reported as failed, naming each failed table). The worker keeps one
:class:`~lakesync.lakehouse.runner.DbtInvoker`, so dbt parses the project only when it changed.

The same worker also runs ``lakesync compact`` (:func:`lakesync.lakehouse.compaction.compact`) on
its warm
session when asked (``RunRequest(kind="compact")``, :meth:`PipelineWorker.compact`): the gateway
schedules it every ``compaction_interval`` seconds, between pipeline runs. ``lakesync materialise``
(``kind="materialise"``) runs there too when the command line hands it over.

Protocol, one JSON object per line: the parent writes :class:`RunRequest` to the worker's stdin,
the worker answers on its stdout with lines ``{"event": NAME, "data": ...}``
(:func:`encode_line`, :func:`decode_line`): a request with ``progress`` first gets its
:data:`WorkerEvent` values as they happen (dbt nodes, tables shipped or compacted), then every
request gets one ``reply`` (:class:`RunReply`). The gateway streams the same lines to
``lakesync pipeline run``, ``materialise`` and ``compact`` when they hand their work to it
(``POST /v1/admin/lake/run``). Everything else the worker, dbt, Spark or the
JVM print goes to its stderr, which the parent copies to ``<data dir>/pipeline.log`` through one
:class:`~lakesync.redaction.Redactor` of the secrets its configuration resolves (a driver or the
JVM may print a DSN): file descriptor 1 is moved there at start, so no stray line can corrupt a
reply. A failed run is a
reply with ``ok: false`` and the worker stays up for the next one; the worker exits when its stdin
closes (the gateway stopped). Settings are read again for every run, but a live Spark session keeps
the Spark settings it started with: a changed ``lake.spark_*`` needs a gateway restart.

:class:`PipelineWorker` is the parent's side: it starts the process on first use, restarts it
after a crash (that run is reported as failed), and terminates it on shutdown. Each run's Iceberg
commits are atomic, so a run killed at any point is picked up by the next one.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import msgspec

from lakesync import telemetry
from lakesync.config import load_config
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.errors import LakeSyncError
from lakesync.lakehouse.compaction import TableCompaction, compact
from lakesync.lakehouse.history import shipments
from lakesync.lakehouse.pipeline import (
    Built,
    NodeProgress,
    NodesPlanned,
    PipelineEvent,
    PipelineOutcome,
    Shipped,
    node_events,
    run_and_ship,
)
from lakesync.lakehouse.process_env import stop_process
from lakesync.lakehouse.runner import DbtInvoker
from lakesync.lakehouse.settings import LakeSettings, config_redactor
from lakesync.lakehouse.shipping import ShipResult, ship
from lakesync.redaction import Redactor
from lakesync.status import Shipment

__all__ = [
    "Compacted",
    "JobKind",
    "PipelineWorker",
    "Queued",
    "RunReply",
    "RunRequest",
    "SecondaryFailures",
    "TablesPlanned",
    "WorkerDiedError",
    "WorkerEvent",
    "decode_line",
    "encode_line",
    "failed_reply",
    "handle",
    "main",
    "run_reply",
]

_log = logging.getLogger(__name__)

LOG_ROTATE_BYTES = 16 << 20
"""``pipeline.log`` is moved to ``pipeline.log.1`` when a worker starts and it is larger."""


JobKind = Literal["pipeline", "compact", "materialise"]
"""What the worker runs: ``lakesync pipeline run``, ``lakesync compact`` or ``lakesync
materialise``."""


class RunRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Ask the worker for one pipeline run, or (``kind="compact"``) one ``lakesync compact``, or
    (``kind="materialise"``) one ``lakesync materialise``."""

    full_refresh: bool = False
    tests: bool = True
    kind: JobKind = "pipeline"
    pushes: list[str] = []
    """W3C ``traceparent`` values of the pushes the gateway landed since the last run: the
    run's span continues their trace (empty: tracing is off)."""
    progress: bool = False
    """Send the run's :data:`WorkerEvent` values before the reply."""


class SecondaryFailures(msgspec.Struct):
    """A run's failed writes to one fan-out secondary (``lakesync_destination_secondary_failures``
    in the gateway's ``/metrics``)."""

    destination: str
    secondary: str
    count: int


class RunReply(msgspec.Struct):
    """One run's outcome: the :class:`~lakesync.lakehouse.runner.PipelineResult` fields, or the
    error."""

    ok: bool
    error: str = ""
    rows_merged: int = 0
    tables_updated: list[str] = []
    elapsed_s: float = 0.0
    position: int | None = None
    rows_shipped: int = 0
    """Rows applied to the declared destinations after the dbt run (``destinations:``)."""
    compacted: list[TableCompaction] = []
    """A compaction's per-table figures (:func:`lakesync.lakehouse.compaction.compact`)."""
    secondary_failures: list[SecondaryFailures] = []
    """Failed writes to fan-out secondaries while shipping (the gateway counts them)."""
    shipments: list[Shipment] = []
    """What shipping did per destination and table (the gateway records it for its status)."""
    error_code: str = ""
    """The error code of the exception that failed the whole run (a LakeSync error's, else
    ``INTERNAL_ERROR``), so a command line that handed the run over exits as it would have
    in-process; empty when the run ended (even with failed tables: see ``error``)."""


@dataclass(frozen=True, slots=True)
class TablesPlanned:
    """A compaction will maintain these tables, in order."""

    tables: list[str]


@dataclass(frozen=True, slots=True)
class Compacted:
    """One table maintained (or not: ``result.error``)."""

    result: TableCompaction


@dataclass(frozen=True, slots=True)
class Queued:
    """The gateway's worker runs another job now (``running``); this one starts after it."""

    running: str


WorkerEvent = PipelineEvent | TablesPlanned | Compacted | Queued
"""What a run reports while it goes (a pipeline run's :data:`PipelineEvent` values, a
compaction's tables) and, from the gateway, that the run waits for the one going on."""

_EVENTS: dict[str, type[Any]] = {
    "nodesPlanned": NodesPlanned,
    "nodeProgress": NodeProgress,
    "built": Built,
    "shipped": Shipped,
    "tablesPlanned": TablesPlanned,
    "compacted": Compacted,
    "queued": Queued,
    "reply": RunReply,
}
_NAMES = {cls: name for name, cls in _EVENTS.items()}


class _Line(msgspec.Struct):
    event: str
    data: msgspec.Raw


class WorkerDiedError(RuntimeError):
    """The worker process exited during a run (killed, out of memory); the next run restarts it."""


_request_decoder = msgspec.json.Decoder(RunRequest)
_line_decoder = msgspec.json.Decoder(_Line)
_encoder = msgspec.json.Encoder()


def encode_line(item: WorkerEvent | RunReply) -> bytes:
    """One line of the worker's answer (and of ``POST /v1/admin/lake/run``'s NDJSON stream):
    ``{"event": NAME, "data": ...}`` and a newline."""
    return _encoder.encode({"event": _NAMES[type(item)], "data": item}) + b"\n"


def decode_line(line: str | bytes) -> WorkerEvent | RunReply:
    """The event or reply of one line :func:`encode_line` wrote; raises
    :class:`msgspec.DecodeError` (a :class:`ValueError`) for anything else."""
    raw = _line_decoder.decode(line)
    kind = _EVENTS.get(raw.event)
    if kind is None:
        raise msgspec.DecodeError(f"unknown event {raw.event!r}")
    decoded: WorkerEvent | RunReply = msgspec.json.decode(raw.data, type=kind)
    return decoded


Emit = Callable[[WorkerEvent], None]


def _serve(data_dir: Path | None, requests: IO[str], replies: IO[str]) -> None:
    dbt = DbtInvoker()  # kept for the worker's lifetime: dbt parses only a changed project

    def send(item: WorkerEvent | RunReply) -> None:
        replies.write(encode_line(item).decode())
        replies.flush()

    for line in requests:
        if not line.strip():
            continue
        try:
            request = _request_decoder.decode(line)
        except msgspec.DecodeError as exc:
            reply = RunReply(ok=False, error=f"bad request: {exc}", error_code="VALIDATION_ERROR")
        else:
            reply = handle(data_dir, request, dbt, send if request.progress else None)
        send(reply)


def handle(
    data_dir: Path | None, request: RunRequest, dbt: DbtInvoker, emit: Emit | None = None
) -> RunReply:
    """Run one request in this process, as the worker does for each line it reads: the job of
    its ``kind`` on the worker's ``dbt``, its events to ``emit``; a failure is a failed reply."""
    return _JOBS[request.kind](data_dir, request, dbt, emit)


def failed_reply(exc: Exception) -> RunReply:
    """The reply of a run an exception ended (the command line re-raises it from the code)."""
    if isinstance(exc, LakeSyncError):
        return RunReply(ok=False, error=exc.message, error_code=exc.code)
    return RunReply(ok=False, error=f"{type(exc).__name__}: {exc}", error_code="INTERNAL_ERROR")


def _observer(emit: Emit | None) -> Callable[[PipelineEvent], None]:
    """Log each event of a run (``pipeline.log``) and, when asked, send it to the parent."""

    def observe(event: PipelineEvent) -> None:
        _log_event(event)
        if emit is not None:
            emit(event)

    return observe


def _shipping(shipped: list[ShipResult], metrics: DestinationMetrics) -> dict[str, Any]:
    """The reply's shipping fields: rows shipped, failed secondary writes, shipments."""
    return {
        "rows_shipped": sum(s.rows for s in shipped),
        "secondary_failures": [
            SecondaryFailures(d, s, n)
            for (d, s), n in metrics.secondary_failure_counts().items()
        ],
        "shipments": shipments(shipped),
    }


def _log_event(event: PipelineEvent) -> None:
    """The worker's log of a run's progress (``pipeline.log``)."""
    match event:
        case NodeProgress(node=node, status=status):
            _log.info("%-8s %s", status, node)
        case NodesPlanned(nodes=nodes):
            _log.info("dbt runs %d nodes", nodes)
        case Built(result=result):
            _log.info("pipeline run done: %d deltas merged in %.1f s", result.rows_merged,
                      result.elapsed_s)
        case _:
            s = event.result
            _log.info("shipped %s/%s: %d rows, %s", s.destination, s.table, s.rows,
                      f"failed: {s.error}" if s.error else "ok")


def _run(
    data_dir: Path | None, request: RunRequest, dbt: DbtInvoker, emit: Emit | None
) -> RunReply:
    """One pipeline run, then shipping to the declared destinations
    (:func:`lakesync.lakehouse.pipeline.run_and_ship`, as ``lakesync pipeline run`` does)."""
    _log.info("pipeline run started")
    metrics = DestinationMetrics()
    try:
        config = load_config(None)
        run = run_and_ship(
            LakeSettings.from_config(config, data_dir),
            config,
            full_refresh=request.full_refresh,
            tests=request.tests,
            observer=_observer(emit),
            metrics=metrics,
            dbt=dbt,
            pushes=request.pushes,
        )
    except Exception as exc:  # one failed run is reported; the worker serves the next
        _log.exception("pipeline run failed")
        return failed_reply(exc)
    return run_reply(run, metrics)


def run_reply(run: PipelineOutcome, metrics: DestinationMetrics | None = None) -> RunReply:
    """The reply of a pipeline run that ended (even with failed tables), as the gateway
    records it in its status history; ``metrics`` holds its failed writes to fan-out
    secondaries."""
    # One table's failure is that table's: the others were built and shipped.
    failed = run.failures
    result = run.built
    return RunReply(
        ok=not failed,
        error="; ".join(failed),
        rows_merged=result.rows_merged,
        tables_updated=result.tables_updated,
        elapsed_s=result.elapsed_s,
        position=result.position,
        **_shipping(run.shipped, metrics or DestinationMetrics()),
    )


def _materialise(
    data_dir: Path | None, request: RunRequest, dbt: DbtInvoker, emit: Emit | None
) -> RunReply:
    """One ``lakesync materialise`` (shipping, then tiering) on this worker's Spark session."""
    _log.info("materialise started")
    started = time.monotonic()
    metrics = DestinationMetrics()
    observe = _observer(emit)
    try:
        config = load_config(None)
        shipped = ship(
            LakeSettings.from_config(config, data_dir), config, metrics=metrics,
            on_result=lambda r: observe(Shipped(r)), on_progress=node_events("ship", observe),
            dbt=dbt,
        )
    except Exception as exc:  # reported; the worker serves the next request
        _log.exception("materialise failed")
        return failed_reply(exc)
    failed = [f"{s.destination}/{s.table}: {s.error}" for s in shipped if s.error]
    return RunReply(ok=not failed, error="; ".join(failed),
                    elapsed_s=time.monotonic() - started, **_shipping(shipped, metrics))


def _compact(
    data_dir: Path | None, request: RunRequest, dbt: DbtInvoker, emit: Emit | None
) -> RunReply:
    """One ``lakesync compact`` on this worker's Spark session."""
    _log.info("compaction started")

    def on_table(t: TableCompaction) -> None:
        if t.error is None:
            _log.info("compacted %s: %d → %d data files, %d → %d bytes", t.table,
                      t.files_before, t.files_after, t.bytes_before, t.bytes_after)
        else:
            _log.error("maintenance of %s failed: %s", t.table, t.error)
        if emit is not None:
            emit(Compacted(t))

    try:
        result = compact(
            LakeSettings.from_config(load_config(None), data_dir), on_table, dbt,
            None if emit is None else lambda tables: emit(TablesPlanned(tables)),
        )
    except Exception as exc:  # reported; the worker serves the next request
        _log.exception("compaction failed")
        return failed_reply(exc)
    _log.info("compaction done in %.1f s", result.elapsed_s)
    failures = result.failures  # one table's failure is reported; the others were maintained
    return RunReply(ok=not failures, error="; ".join(failures), elapsed_s=result.elapsed_s,
                    compacted=result.tables)


_JOBS: dict[str, Callable[[Path | None, RunRequest, DbtInvoker, Emit | None], RunReply]] = {
    "pipeline": _run, "compact": _compact, "materialise": _materialise,
}


def exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """End this process (and so its Spark JVM, which exits when its driver does) within
    ``poll_s`` seconds of the death of ``parent``, the process that started it: a gateway that
    was SIGKILLed mid-run leaves no worker running on with a whole JVM's memory (stdin's end
    is seen only between runs). Named by the starter, not read here, so a parent that died
    before this call is noticed too."""

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:  # reparented: the gateway is gone
                _log.warning("the gateway process (pid %d) is gone: the worker stops", parent)
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m lakesync.lakehouse.worker [--data-dir D]``: serve run requests until stdin
    closes or the process that started it is gone."""
    parser = argparse.ArgumentParser(
        prog="python -m lakesync.lakehouse.worker", description=__doc__
    )
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--parent", type=int, default=None,
                        help="pid of the process that started it (default: its parent now)")
    args = parser.parse_args(argv)
    telemetry.configure()
    # Replies get their own copy of fd 1; fd 1 itself (print, dbt, the JVM) goes to stderr.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    exit_with_parent(os.getppid() if args.parent is None else args.parent)
    try:
        _serve(args.data_dir, sys.stdin, replies)
    except KeyboardInterrupt:
        return 130
    return 0


class PipelineWorker:
    """The gateway's side of the worker: ``run()`` one pipeline run, ``close()`` at shutdown."""

    def __init__(
        self, data_dir: Path, log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self._data_dir = data_dir
        self.log_path = log_path
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._redact = _redactor(self._env)

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def _start(self) -> subprocess.Popen[str]:
        if self.log_path.exists() and self.log_path.stat().st_size > LOG_ROTATE_BYTES:
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakesync.lakehouse.worker",
             "--data-dir", str(self._data_dir), "--parent", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self._env, text=True, encoding="utf-8", errors="replace", bufsize=1,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None

        def copy_log() -> None:
            with self.log_path.open("a", encoding="utf-8") as log:
                for line in stderr:
                    log.write(self._redact(line))
                    log.flush()

        threading.Thread(target=copy_log, name="pipeline-worker-log", daemon=True).start()

        def pump() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="pipeline-worker-replies", daemon=True).start()
        self._proc, self._lines = proc, lines
        _log.info("pipeline worker started (pid %d, log %s)", proc.pid, self.log_path)
        return proc

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        full_refresh: bool = False,
        tests: bool = True,
        on_event: Emit | None = None,
    ) -> RunReply | None:
        """One run; ``None`` if ``stop`` was set meanwhile (the worker is then terminated).
        ``on_event`` gets the run's :data:`WorkerEvent` values as they happen.

        Raises :class:`WorkerDiedError` if the worker exits during the run.
        """
        return self.ask(
            RunRequest(full_refresh=full_refresh, tests=tests, pushes=telemetry.take_landed()),
            stop, on_event,
        )

    def compact(
        self, stop: threading.Event | None = None, on_event: Emit | None = None
    ) -> RunReply | None:
        """One compaction (``lakesync compact``), like :meth:`run`; figures in ``compacted``."""
        return self.ask(RunRequest(kind="compact"), stop, on_event)

    def ask(
        self, request: RunRequest, stop: threading.Event | None = None,
        on_event: Emit | None = None,
    ) -> RunReply | None:
        """Run ``request`` (its ``progress`` set when ``on_event`` is given), like :meth:`run`."""
        request = msgspec.structs.replace(request, progress=on_event is not None)
        return self._ask(request, stop, on_event)

    def _ask(
        self, request: RunRequest, stop: threading.Event | None, on_event: Emit | None
    ) -> RunReply | None:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        proc = proc or self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(_encoder.encode(request).decode() + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: the reply pump reports EOF below
        while True:
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                if stop is not None and stop.is_set():
                    self.close()
                    return None
                continue
            if line is None:
                code = proc.wait()
                self._proc = None
                raise WorkerDiedError(f"the pipeline worker exited with code {code} during a run")
            try:
                item = decode_line(line)
            except msgspec.DecodeError:
                _log.warning("pipeline worker printed a line that is not a reply: %r", line[:200])
                continue
            if isinstance(item, RunReply):
                return item
            if on_event is not None:
                on_event(item)

    def close(self, timeout: float = 20.0) -> None:
        """Stop the worker: close its stdin, then terminate, then kill."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(2.0)
            return
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop_process(proc, timeout)


def _redactor(env: Mapping[str, str]) -> Redactor:
    """The redaction of the worker's log: :func:`config_redactor` of the configuration ``env``
    names (a driver or the JVM may print a DSN); only the shapes
    :func:`lakesync.redaction.redact` knows when it does not load (the run then fails saying
    why)."""
    try:
        config = load_config(None, env)
    except LakeSyncError:
        return Redactor()
    return config_redactor(config, env)


if __name__ == "__main__":
    sys.exit(main())
