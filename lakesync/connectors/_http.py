"""HTTP for the SaaS sources: one request with retries (tenacity) that honours ``Retry-After``.

429 and 503 (and connection errors) are retried up to ``attempts`` times, waiting what the
server's ``Retry-After`` asks (seconds), else an exponential backoff; other statuses are the
caller's. Credentials travel in headers set on the client, never in URLs, so errors and logs
that name a URL name no secret.
"""

from __future__ import annotations

from typing import Any

import httpx
import tenacity

__all__ = ["RETRY_STATUSES", "SourceHTTPError", "request"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class SourceHTTPError(Exception):
    """An outside system answered with an error status (after any retries)."""

    def __init__(self, status: int, url: str, detail: str) -> None:
        super().__init__(f"{status} from {url}: {detail[:300]}")
        self.status = status


class _RetryableError(Exception):
    def __init__(self, response: httpx.Response) -> None:
        url = response.request.url.copy_with(query=None)
        super().__init__(f"{response.status_code} from {url}")
        self.response = response


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


class _Wait(tenacity.wait.wait_base):
    """``Retry-After`` when the server sent one, else exponential backoff."""

    def __init__(self, base: float, cap: float) -> None:
        self.backoff = tenacity.wait_exponential(multiplier=base, max=cap)
        self.cap = cap

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, _RetryableError):
            after = _retry_after(exc.response)
            if after is not None:
                return min(after, self.cap)
        return float(self.backoff(retry_state))


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    attempts: int = 8,
    backoff: float = 0.5,
    max_wait: float = 60.0,
    **kwargs: Any,
) -> httpx.Response:
    """Send a request, retrying throttling and unavailability; return the final response
    (any status but the retried ones, which raise :class:`SourceHTTPError` once exhausted)."""
    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=_Wait(backoff, max_wait),
        retry=tenacity.retry_if_exception_type((_RetryableError, httpx.TransportError)),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                response = await client.request(method, url, **kwargs)
                if response.status_code in RETRY_STATUSES:
                    raise _RetryableError(response)
                return response
    except _RetryableError as exc:
        raise SourceHTTPError(exc.response.status_code, str(exc), exc.response.text) from None
    raise AssertionError("unreachable: tenacity either returns or raises")


def check(response: httpx.Response) -> Any:
    """The decoded JSON body of a 2xx response (None when empty, e.g. 204); else
    :class:`SourceHTTPError`."""
    if response.is_success:
        return response.json() if response.content else None
    url = str(response.request.url.copy_with(query=None))
    raise SourceHTTPError(response.status_code, url, response.text)
