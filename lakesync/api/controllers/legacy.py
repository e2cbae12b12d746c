"""Unprefixed (pre-``/v1``) HTTP paths answer 301 to their ``/v1`` equivalent (docs/protocol.md
§5)."""

from __future__ import annotations

from typing import Any

from litestar import HttpMethod, Request, route
from litestar.response import Redirect

__all__ = ["legacy_redirect"]

_PATHS = [
    "/sync/{gw:str}/push",
    "/sync/{gw:str}/pull",
    "/sync/{gw:str}/checkpoint",
    "/sync/{gw:str}/action",
    "/sync/{gw:str}/actions",
    "/admin/flush/{gw:str}",
    "/admin/schema/{gw:str}",
    "/admin/sync-rules/{gw:str}",
    "/admin/connectors/{gw:str}",
    "/admin/connectors/{gw:str}/{name:str}",
    "/admin/metrics/{gw:str}",
]


@route(
    _PATHS,
    http_method=[HttpMethod.GET, HttpMethod.POST, HttpMethod.DELETE],
    status_code=301,
    include_in_schema=False,
)
async def legacy_redirect(request: Request[Any, Any, Any]) -> Redirect:
    """Permanent redirect to the same path under ``/v1``, query string kept."""
    target = "/v1" + request.url.path
    if request.url.query:
        target += "?" + request.url.query
    return Redirect(path=target, status_code=301)
