"""A REST catalog that fails is an outage of the lake, never a crash of the gateway nor a leak.

The catalog is the real one (Apache Iceberg's ``RESTCatalogServer``, :mod:`tests.rest_catalog`)
behind an :class:`~tests.rest_catalog.AuthProxy` that issues the gateway an OAuth2 token and, on
demand, answers with a failure instead: a 500, 400 or 501 whose body quotes the request's bearer
token back, or a body that is no JSON; a :class:`~tests.fault_proxy.FaultProxy` in front resets
connections. Whatever it answers, at ``lakesync up``'s start or once the catalog is open:

- the gateway starts and acknowledges pushes; the admin flush answers 502 ``CATALOG_ERROR``;
- each failure is one log line saying which catalog and what to check, logged once however many
  flushes it fails (not one a flush), with no stack trace, and with neither the lake's
  credential nor the token the catalog issued;
- once the catalog answers, the scheduled flush lands every acknowledged delta exactly once.

Opening the catalog (what ``lakesync query`` and the pipeline do) fails the same way: one
:class:`~lakesync.lakehouse.catalog.CatalogUnavailableError` line, no secret; and the gateway's
log masks the token a catalog issued wherever else it might appear.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from functools import partial
from pathlib import Path

import httpx
import pytest

from lakesync.api.logs import RedactingFilter
from lakesync.lakehouse.catalog import CatalogUnavailableError, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import auth, token
from tests.fault_proxy import FaultProxy, Request
from tests.gateway_process import ServerProcess
from tests.lakehouse.outage import landed, push
from tests.netns import wait_for
from tests.rest_catalog import CATALOG_FAILURES, AuthProxy, rest_catalog_server

ADMIN = auth(token("ops", role="admin"))
_LANDING = '"logger": "lakesync.lakehouse.landing"'

# What the gateway's one line says for each failure (the catalog's own words follow it).
SAYS = {
    "500": "answered with an error (ServerError",
    "400": "answered with an error (BadRequestError",
    "501": "answered with an error (NotImplementedError",
    "malformed": "sent an answer that is no Iceberg REST catalog's",
    "reset": "cannot reach the REST catalog at",
}


def _not_the_token(request: Request) -> bool:
    return not request[1].startswith("/v1/oauth/tokens")


def _flush(gw: ServerProcess) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=120)


def _lines(gw: ServerProcess, needle: str) -> list[str]:
    return [line for line in gw.log_path.read_text().splitlines() if needle in line]


def _logged(gw: ServerProcess, needle: str) -> bool:
    return bool(_lines(gw, needle))


def _landed_once(settings: LakeSettings, acked: list[str]) -> bool:
    return landed(settings) == Counter(acked)


@pytest.mark.slow
def test_a_failing_rest_catalog_is_an_outage_one_line_each_and_no_token(tmp_path: Path) -> None:
    issued = f"issued-{uuid.uuid4().hex}"
    secret = f"rest-secret-{uuid.uuid4().hex}"
    with rest_catalog_server(tmp_path / "rest") as uri, \
            AuthProxy(uri, issued, f"lakesync:{secret}") as catalog, \
            FaultProxy(catalog.uri) as wire:
        env = {"LAKESYNC_CATALOG_URI": wire.url,
               "LAKESYNC_CATALOG_CREDENTIAL": f"lakesync:{secret}",
               "LAKESYNC_FLUSH_INTERVAL": "1"}
        data = tmp_path / "data"
        settings = LakeSettings.from_env(data, env=env)
        # At the start the catalog answers its config, then 500 to the landing table's
        # creation (what stopped `lakesync up` with a traceback ending in the body).
        catalog.fail("500", config=False)
        with ServerProcess(data, env=env) as gw:
            acked = push(gw, "alice", 20)
            r = _flush(gw)
            assert (r.status_code, r.json()["code"]) == (502, "CATALOG_ERROR"), r.text
            assert issued not in r.text and secret not in r.text
            for failure in CATALOG_FAILURES[1:]:  # then the others, the catalog still closed
                catalog.fail(failure, config=False)
                wait_for(f"the {failure} line", partial(_logged, gw, SAYS[failure]))
                acked += push(gw, f"client-{failure}", 10)
            catalog.fail(None)
            wire.fail(_not_the_token)  # connections reset
            wait_for("the reset line", partial(_logged, gw, SAYS["reset"]))
            wire.release()
            wait_for("every acknowledged delta landed once",
                     partial(_landed_once, settings, acked))
            # Once open, the same: every failure is an outage, retried until the catalog is back.
            for failure in CATALOG_FAILURES:
                catalog.fail(failure, config=True)
                acked += push(gw, f"later-{failure}", 10)
                r = _flush(gw)
                assert (r.status_code, r.json()["code"]) == (502, "CATALOG_ERROR"), r.text
                catalog.fail(None)
                wait_for(f"the deltas pushed during the {failure} landed once",
                         partial(_landed_once, settings, list(acked)))
        assert catalog.failed > 0
    log = gw.log_path.read_text()
    assert "Traceback" not in log and issued not in log and secret not in log
    for line in log.splitlines():
        json.loads(line)  # every line is one log record: no stack trace, no stray output
    # The flusher logs the outage at the start once (the start's line), however many flushes
    # it failed; the later one at most once more (the admin flush, whose request logs its own
    # line, may have been the only one it failed).
    five_hundreds = [line for line in _lines(gw, SAYS["500"]) if _LANDING in line]
    assert '"landing: the REST catalog at' in five_hundreds[0], five_hundreds
    assert len(five_hundreds) <= 2, five_hundreds
    for failure in CATALOG_FAILURES:
        assert _lines(gw, SAYS[failure]), failure
    assert _lines(gw, "the lake answers again")


@pytest.mark.parametrize("failure", [*CATALOG_FAILURES, "reset"])
def test_opening_a_failing_rest_catalog_is_one_line_without_a_secret(
    tmp_path: Path, failure: str
) -> None:
    """What ``lakesync query``, the pipeline and a gateway's first flush see: a
    :class:`CatalogUnavailableError` of one line naming the catalog, no token, no credential."""
    issued = f"issued-{uuid.uuid4().hex}"
    secret = f"rest-secret-{uuid.uuid4().hex}"
    with AuthProxy("http://127.0.0.1:9", issued, f"lakesync:{secret}") as catalog, \
            FaultProxy(catalog.uri) as wire:
        if failure == "reset":
            wire.fail(_not_the_token)
        else:
            catalog.fail(failure)
        settings = LakeSettings.from_env(tmp_path, env={
            "LAKESYNC_CATALOG_URI": wire.url, "LAKESYNC_CATALOG_CREDENTIAL": f"lakesync:{secret}",
        })
        with pytest.raises(CatalogUnavailableError) as raised:
            open_catalog(settings)
    message = raised.value.message
    assert SAYS[failure] in message or f"cannot open the REST catalog at {wire.url}" in message
    assert wire.url in message and "\n" not in message
    assert issued not in message and secret not in message


def test_the_log_masks_the_token_a_catalog_issued(tmp_path: Path) -> None:
    """The gateway's log filter, built at start with the secrets the settings hold, masks the
    token a REST catalog issued later for the lake's credential (in no setting)."""
    issued = f"issued-{uuid.uuid4().hex}"
    log_filter = RedactingFilter(secrets=["some-jwt-secret-of-the-gateway"])
    with AuthProxy("http://127.0.0.1:9", issued, "lakesync:rest-secret-1234") as catalog:
        catalog.fail("500")
        settings = LakeSettings.from_env(tmp_path, env={
            "LAKESYNC_CATALOG_URI": catalog.uri,
            "LAKESYNC_CATALOG_CREDENTIAL": "lakesync:rest-secret-1234",
        })
        with pytest.raises(CatalogUnavailableError):
            open_catalog(settings)
    record = logging.LogRecord("lakesync.x", logging.ERROR, __file__, 1, "the catalog said %s",
                               (f"nothing for {issued}",), None)
    log_filter.filter(record)
    assert record.getMessage() == "the catalog said nothing for ***"
