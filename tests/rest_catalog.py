"""A real Iceberg REST catalog server for tests: Apache Iceberg's own ``RESTCatalogServer``.

``scripts/services.sh`` resolves its jars from Maven Central into
``.venv/share/lakesync/rest-catalog`` and starts one shared server
(``LAKESYNC_TEST_REST_CATALOG_URI``). The lake's namespaces and tables have fixed names, so a test
that writes a lake gets a server of its own from the same jars (:func:`rest_catalog_server`), the
way the database tests create their own databases. :class:`AuthProxy` puts a bearer-token and
OAuth2 client-credentials check in front of a server (the fixture server accepts any token).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lakesync.lakehouse.object_store import S3FILEIO
from tests.conftest import S3_ACCESS_KEY_ID, S3_ENDPOINT, S3_SECRET_ACCESS_KEY
from tests.gateway_process import free_port, serving
from tests.netns import Host

__all__ = [
    "CATALOG_FAILURES", "REST_CATALOG_JARS", "REST_CATALOG_URI", "AuthProxy",
    "require_rest_catalog", "rest_catalog_server", "s3_catalog_env",
]

REST_CATALOG_URI = os.environ.get("LAKESYNC_TEST_REST_CATALOG_URI", "")
REST_CATALOG_JARS = Path(sys.prefix) / "share" / "lakesync" / "rest-catalog"


def require_rest_catalog() -> None:
    """Return when the REST catalog server's jars and a JVM are installed; otherwise skip (fail
    under CI, where ``scripts/services.sh`` must have installed them)."""
    if (REST_CATALOG_JARS / ".pom.xml").is_file() and shutil.which("java"):
        return
    reason = f"no Iceberg REST catalog server jars in {REST_CATALOG_JARS} (scripts/services.sh)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def s3_catalog_env() -> dict[str, str]:
    """The ``CATALOG_*`` variables of a server (:func:`rest_catalog_server`) whose warehouse is
    on the test S3 server: it writes there with Iceberg's S3FileIO and vends its S3 keys in every
    LoadTable answer."""
    return {
        "CATALOG_IO__IMPL": S3FILEIO, "CATALOG_S3_ENDPOINT": S3_ENDPOINT,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true", "CATALOG_CLIENT_REGION": "us-east-1",
        "CATALOG_S3_ACCESS__KEY__ID": S3_ACCESS_KEY_ID,
        "CATALOG_S3_SECRET__ACCESS__KEY": S3_SECRET_ACCESS_KEY,
        "CATALOG_INCLUDE__CREDENTIALS": "true",
    }


def _answers(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/v1/config", timeout=2):
            return True
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def rest_catalog_server(
    root: Path,
    warehouse: str | None = None,
    env: dict[str, str] | None = None,
    host: Host | None = None,
) -> Iterator[str]:
    """Run a REST catalog server of its own, backed by a SQLite catalog in ``root`` and
    ``warehouse`` (default ``root/warehouse``); yield its URI. ``env`` adds ``CATALOG_*``
    variables (catalog properties: ``CATALOG_IO__IMPL`` is ``io-impl``). With ``host`` (a
    ``tests/netns.py`` host) it runs there, on that host's address."""
    require_rest_catalog()
    root.mkdir(parents=True, exist_ok=True)
    port = free_port() if host is None else 8181  # a host's ports are all its own
    server_env = {
        **os.environ,
        "CATALOG_URI": f"jdbc:sqlite:{root / 'rest-catalog.db'}",
        "CATALOG_WAREHOUSE": warehouse or (root / "warehouse").as_uri(),
        "CATALOG_REST_PORT": str(port),
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        **(env or {}),
    }
    args = ["java", "-Xmx512m", "-cp", f"{REST_CATALOG_JARS}/*",
            "org.apache.iceberg.rest.RESTCatalogServer"]
    log = (root / "rest-catalog.log").open("wb")
    if host is None:
        proc = subprocess.Popen(args, env=server_env, stdout=log, stderr=subprocess.STDOUT)
    else:
        proc = host.popen(args, log=root / "rest-catalog.log", env=server_env)
    uri = f"http://{'127.0.0.1' if host is None else host.ip}:{port}"
    try:
        with serving(proc, uri, _answers, root / "rest-catalog.log",
                     "the REST catalog server", 120):
            yield uri
    finally:
        log.close()


CATALOG_FAILURES = ("500", "400", "501", "malformed")
"""What :meth:`AuthProxy.fail` makes the catalog answer: an Iceberg REST error body with status
500, 400 or 501 whose message echoes the bearer token the request carried, or (``malformed``) a
200 whose body is no JSON."""


class AuthProxy:
    """An HTTP proxy to ``upstream`` that lets through only requests bearing ``token`` and, on
    ``POST /v1/oauth/tokens``, only the client credentials ``client_id:client_secret`` (it then
    issues ``token``); others get 401 with an Iceberg REST / OAuth2 error body. After
    :meth:`fail` it answers the catalog's requests with a failure instead (the token is still
    issued)."""

    def __init__(self, upstream: str, token: str, credential: str) -> None:
        self.upstream = upstream
        self.token = token
        self.client_id, self.client_secret = credential.split(":", 1)
        self.refused = 0
        self.failure: str | None = None
        self.failing_config = True
        self.failed = 0
        """How many requests got :attr:`failure`'s answer."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def fail(self, failure: str | None, *, config: bool = True) -> None:
        """Answer every request but the token's with ``failure`` (one of
        :data:`CATALOG_FAILURES`; None: forward again); ``config=False`` forwards
        ``GET /v1/config`` still, so a client opens the catalog and fails on its next request."""
        assert failure is None or failure in CATALOG_FAILURES, failure
        self.failure, self.failing_config = failure, config

    def __enter__(self) -> AuthProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refuse(self, body: dict[str, object]) -> None:
                proxy.refused += 1
                self._reply(401, json.dumps(body).encode(), {"Content-Type": "application/json"})

            def _fail(self, failure: str) -> None:
                if failure == "malformed":
                    self._reply(200, b"{not json", {"Content-Type": "application/json"})
                    return
                # A server that quotes the request back: the token bare, as no pattern finds it.
                sent = self.headers.get("Authorization", "").removeprefix("Bearer ")
                body = {"error": {"message": f"the request with {sent} failed",
                                  "type": "RuntimeException", "code": int(failure)}}
                self._reply(int(failure), json.dumps(body).encode(),
                            {"Content-Type": "application/json"})

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command == "POST" and self.path.rstrip("/").endswith("/v1/oauth/tokens"):
                    form = urllib.parse.parse_qs(body.decode())
                    if (form.get("client_id") != [proxy.client_id]
                            or form.get("client_secret") != [proxy.client_secret]):
                        self._refuse({"error": "invalid_client",
                                      "error_description": "unknown client or wrong secret"})
                        return
                    token = {"access_token": proxy.token, "token_type": "Bearer",
                             "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}
                    self._reply(200, json.dumps(token).encode(),
                                {"Content-Type": "application/json"})
                    return
                failure = proxy.failure
                if failure is not None and (proxy.failing_config or "/v1/config" not in self.path):
                    proxy.failed += 1
                    self._fail(failure)
                    return
                if self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    self._refuse({"error": {"message": "not authorized: bad or missing token",
                                            "type": "NotAuthorizedException", "code": 401}})
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body or None, headers=headers,
                    method=self.command,
                )
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        self._reply(response.status, response.read(), dict(response.headers))
                except urllib.error.HTTPError as err:
                    self._reply(err.code, err.read(), dict(err.headers))

            do_GET = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815

        return Handler
