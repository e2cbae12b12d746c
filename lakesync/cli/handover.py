"""Where a command's lake job runs: ``lakesync pipeline run``, ``materialise`` and ``compact``
use the warm pipeline worker of a running ``lakesync up`` instead of starting a JVM; the one
place that decides is :func:`lake_job` (a :class:`LakeJob`: its gateway, or this process).

How it finds it: ``lakesync up`` writes ``<data dir>/gateway.json`` (its URL, pid and
configuration file, :mod:`lakesync.api.datadir`) while it serves with its worker. A command
reads it, checks the process is alive, and posts the run to ``POST /v1/admin/lake/run`` with an
admin token minted from the configuration's secret (as ``lakesync status`` does); the gateway
streams the run's events (dbt nodes, tables shipped or compacted) as NDJSON and the command
draws them with the same progress code as a run in this process, then prints the same summary.

It runs in this process, as before, with ``--in-process``, or when no gateway serves the data dir
(no file, or its process is gone), the address does not answer, the gateway runs no worker, the
secret is not set, or the gateway runs with another configuration file (a note on stderr says
which).

- **Busy worker**: the run is queued behind the one going on (a scheduled run or another
  command's) and starts after it, so it reads every row landed before it was asked for and runs
  with its own options; joining the run going on would give neither. The progress line says it
  waits.
- **Ctrl-C** stops following: the run goes on in the gateway (``lakesync status`` shows how it
  ended) and the command exits 130. Cancelling it would kill the warm worker, so the next run
  would pay the JVM's start again; its Iceberg commits are atomic either way.
- **Errors**: a run that failed exits as it would in this process, with the same message and
  exit code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import httpx
import typer
from rich.console import Console

from lakesync.api.datadir import GatewayAddress, running_gateway
from lakesync.cli.output import plain
from lakesync.config import Config
from lakesync.errors import AuthError, LakeSyncError, error_for_code
from lakesync.lakehouse.jobs import JOBS, JobName, JobSpec
from lakesync.lakehouse.worker import RunReply, WorkerEvent, decode_line
from lakesync.tokens import mint_token

__all__ = ["Gateway", "InProcessOption", "LakeJob", "find_gateway", "hand_over", "lake_job"]

T = TypeVar("T")

InProcessOption = Annotated[
    bool,
    typer.Option(
        "--in-process",
        help="Run in this process (start Spark here) even when lakesync up serves the data dir "
        "with its warm pipeline worker.",
    ),
]

_SUBJECT = "lakesync-cli"
_ANY_GATEWAY = "lakesync"
"""The gateway a minted token names (the route is the process's, not one gateway's)."""


@dataclass(frozen=True, slots=True)
class Gateway:
    """The running gateway a command hands its run to, and the admin token it sends."""

    address: GatewayAddress
    token: str


def _note(message: str) -> None:
    Console(stderr=True).print(plain(message), soft_wrap=True)


def find_gateway(data_dir: Path, config: Config, in_process: bool) -> Gateway | None:
    """The gateway serving ``data_dir`` with its worker, to hand the run to; None to run in this
    process (``in_process``, none running, or one this command cannot use: a note says why)."""
    if in_process:
        return None
    found = running_gateway(data_dir)
    if found is None:
        return None
    ours = None if config.source is None else str(config.source.resolve())
    if found.config != ours:
        _note(f"lakesync up (pid {found.pid}) serves {data_dir} with the configuration "
              f"{found.config or '(none)'}, this command has {ours or '(none)'}: running here")
        return None
    if not config.jwt_secrets:
        _note(f"lakesync up (pid {found.pid}) serves {data_dir}, but LAKESYNC_JWT_SECRET is not "
              "set to ask it: running here")
        return None
    token = mint_token(config.jwt_secrets[0], _SUBJECT, _ANY_GATEWAY, "admin", ttl_s=300)
    return Gateway(found, token)


def _refused(response: httpx.Response) -> LakeSyncError:
    try:
        body = response.json()
        message, code = str(body["error"]), str(body["code"])
    except (ValueError, KeyError, TypeError):
        message, code = response.reason_phrase, ""
    if response.status_code in (401, 403):
        return AuthError(
            f"the gateway refused the token ({response.status_code}: {message}); set "
            "LAKESYNC_JWT_SECRET to its secret, or pass --in-process"
        )
    return error_for_code(code, f"the gateway answered {response.status_code}: {message}",
                          response.status_code)


def hand_over(
    gateway: Gateway,
    job: Literal["pipeline", "materialise", "compact"],
    on_event: Callable[[WorkerEvent], None],
    *,
    full_refresh: bool = False,
    tests: bool = True,
) -> RunReply | None:
    """Run ``job`` on the gateway's worker, handing each event to ``on_event`` as it comes;
    returns the run's reply, or None when the gateway did not take it (its address does not
    answer, or it runs no worker): the caller then runs it in this process. Raises the run's
    own error when an exception ended it, as it would have been raised in this process."""
    address = gateway.address
    body = {"job": job, "fullRefresh": full_refresh, "tests": tests}
    reply: RunReply | None = None
    try:
        # No read timeout: a dbt model may run for minutes without an event.
        with httpx.Client(
            base_url=address.url, timeout=httpx.Timeout(30, read=None),
            headers={"Authorization": f"Bearer {gateway.token}"},
        ) as http, http.stream("POST", "/v1/admin/lake/run", json=body) as response:
            if response.status_code == 404:
                response.read()
                _note(f"lakesync up (pid {address.pid}) runs no pipeline worker: running here")
                return None
            if response.status_code != 200:
                response.read()
                raise _refused(response)
            for line in response.iter_lines():
                if not line:
                    continue
                item = decode_line(line)
                if isinstance(item, RunReply):
                    reply = item
                    break
                on_event(item)
    except httpx.ConnectError:
        _note(f"lakesync up (pid {address.pid}) does not answer at {address.url}: running here")
        return None
    except httpx.TransportError as exc:
        raise LakeSyncError(
            f"the gateway (pid {address.pid}) stopped answering during the run ({exc}); "
            "lakesync status shows how the run ended"
        ) from None
    except KeyboardInterrupt:
        _note(f"interrupted: the run goes on in lakesync up (pid {address.pid}); lakesync status "
              "shows how it ends")
        raise typer.Exit(130) from None
    if reply is None:
        raise LakeSyncError(
            f"the gateway (pid {address.pid}) ended the run's stream without its outcome; "
            "lakesync status shows how the run ended"
        )
    if reply.error_code:
        raise error_for_code(reply.error_code, reply.error)
    return reply


@dataclass(frozen=True, slots=True)
class LakeJob:
    """One lake job of a command (:data:`~lakesync.lakehouse.jobs.JOBS`) and where it runs: on
    ``gateway``'s warm worker, or in this process (``gateway`` None)."""

    spec: JobSpec
    gateway: Gateway | None

    @property
    def runs_here(self) -> bool:
        """Whether it runs in this process (no gateway to hand it to)."""
        return self.gateway is None

    def run(
        self,
        on_event: Callable[[WorkerEvent], None],
        here: Callable[[], T],
        handed: Callable[[RunReply], T],
        *,
        full_refresh: bool = False,
        tests: bool = True,
    ) -> T:
        """Run it: handed to the gateway (its events to ``on_event`` as they come, the outcome
        ``handed(reply)``), or ``here()`` in this process, also when the gateway does not take
        it (:func:`hand_over` says why). Raises the run's own error when an exception ended it
        on the gateway, as ``here()`` would have."""
        if self.gateway is not None and self.spec.worker_kind is not None:
            reply = hand_over(self.gateway, self.spec.worker_kind, on_event,
                              full_refresh=full_refresh, tests=tests)
            if reply is not None:
                return handed(reply)
        return here()


def lake_job(name: JobName, data_dir: Path, config: Config, in_process: bool) -> LakeJob:
    """The job ``name`` of a command on ``data_dir``: a job that runs on the warm worker goes to
    the gateway serving the data dir (:func:`find_gateway`; a note says why it does not),
    unless ``in_process``; any other runs in this process."""
    spec = JOBS[name]
    gateway = find_gateway(data_dir, config, in_process) if spec.on_worker else None
    return LakeJob(spec, gateway)
