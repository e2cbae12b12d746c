"""The real gateway app in-process for client tests, with faults a test can put in front of it.

Each client gets an :class:`HttpTransport` over an httpx client whose transport hands requests to
the Litestar app (no socket, no subprocess). A test can queue faults for the next requests: an
httpx error (the gateway cannot be reached) or a :class:`LakeSyncError` (answered as the gateway
would, docs/protocol.md §5 body and ``Retry-After``); a faulted request never reaches the gateway.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from litestar.testing import TestClient
from litestar.testing.transport import TestClientTransport

from lakesync.api.app import create_app
from lakesync.client._auth import TokenProvider
from lakesync.client.errors import LakeSyncError, RateLimitedError
from lakesync.client.transport import HttpTransport
from lakesync.delta import RowDelta
from lakesync.merge import merge_state
from tests.api.helpers import make_settings, token

Fault = httpx.HTTPError | LakeSyncError


class InProcessGateway:
    """One running gateway app; ``connect(sub)`` gives a client's transport to gateway ``gw_id``.

    ``faults`` are served to the next requests in order; ``requests`` records every request
    (``"POST /v1/sync/gw/push"``), faulted or not.
    """

    def __init__(self, http: TestClient[Any], gw_id: str) -> None:
        self._http = http
        self.gw_id = gw_id
        self.faults: list[Fault] = []
        self.requests: list[str] = []

    def connect(self, sub: str) -> HttpTransport:
        """A transport for client ``sub``, through the fault queue to the app."""
        http = httpx.Client(transport=_Faulty(self, TestClientTransport(self._http)))
        tokens = TokenProvider(token(sub, self.gw_id))
        return HttpTransport(str(self._http.base_url), self.gw_id, tokens, http=http)

    def admin(self, path: str, body: Any) -> None:
        """POST an admin request (``schema``, ``sync-rules``) for this gateway id."""
        resp = self._http.post(
            f"/v1/admin/{path}/{self.gw_id}",
            json=body,
            headers={"Authorization": f"Bearer {token('admin', self.gw_id, role='admin')}"},
        )
        assert resp.status_code == 200, resp.text

    def deltas(self) -> tuple[list[RowDelta], int]:
        """Every delta the gateway holds (one pull from the start) and its ingest head."""
        tokens = TokenProvider(token("observer", self.gw_id))
        tr = HttpTransport(str(self._http.base_url), self.gw_id, tokens, http=self._http)
        try:
            page = tr.pull("observer", 0, 10_000)
        finally:
            tr.close()  # its loop thread; the test client stays open
        assert not page.has_more
        return page.deltas, page.server_hlc

    def state(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The merged state of every delta the gateway holds, without null cells."""
        rows = merge_state(self.deltas()[0])
        return {k: {c: v for c, v in row.items() if v is not None} for k, row in rows.items()}

    def pushes(self) -> int:
        """How many push requests reached this gateway id or its fault queue."""
        return self.requests.count(f"POST /v1/sync/{self.gw_id}/push")


class _Faulty(httpx.BaseTransport):
    def __init__(self, gw: InProcessGateway, app: TestClientTransport[Any]) -> None:
        self._gw = gw
        self._app = app

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._gw.requests.append(f"{request.method} {request.url.path}")
        if not self._gw.faults:
            return self._app.handle_request(request)
        fault = self._gw.faults.pop(0)
        if isinstance(fault, httpx.HTTPError):
            raise fault
        headers = {}
        if isinstance(fault, RateLimitedError):
            headers["Retry-After"] = str(fault.retry_after)
        return httpx.Response(
            fault.status, json={"error": fault.message, "code": fault.code}, headers=headers
        )


@contextmanager
def running_gateway(data_dir: Path) -> Iterator[TestClient[Any]]:
    """The gateway app on an embedded store in ``data_dir``, serving until the block ends."""
    with TestClient(create_app(make_settings(data_dir))) as http:
        yield http


def fresh_gateway(http: TestClient[Any]) -> InProcessGateway:
    """A gateway id no other test used, on the running app."""
    return InProcessGateway(http, f"gw{uuid.uuid4().hex[:12]}")
