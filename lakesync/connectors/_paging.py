"""Bounds on the outside systems' pagination: every paging loop of a source ends, whatever the
system answers.

An API that repeats its next-page token, says "not the last page" forever, or never reaches the
total it announced would otherwise keep a poll requesting pages as fast as it answers (with the
connector's credentials). :class:`PageGuard` stops that: a token (``nextPageToken``,
``nextRecordsUrl``, an offset, a log position) seen before, a page that is not the last but
brings no row the previous page did not, or a "not last" page with no way to the next one is a
:class:`PagingError`, which ends the poll (kept as the connector's last error; the next poll
starts again from the stored cursor). Ending quietly instead would be worse than looping: a
listing cut short would make the full diffs delete the rows it did not reach.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["PageGuard", "PagingError"]

T = TypeVar("T", bound=Hashable)


class PagingError(Exception):
    """An outside system's pagination that would not end or that contradicts itself."""


class PageGuard:
    """One paging loop's bound (see the module docstring); ``what`` names the listing in the
    error (``"Jira search"``, ``"comments of issue 10001"``)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.pages = 0
        self._tokens: set[Hashable] = set()
        self._previous: frozenset[Hashable] = frozenset()

    def page(self, ids: Iterable[Hashable], last: bool) -> None:
        """Record a page with the ids of its items; ``last`` says whether the system called it
        the last. A page that is not the last must bring an id the previous page did not."""
        self.pages += 1
        now = frozenset(ids)
        if not last and not now - self._previous:
            raise PagingError(
                f"{self.what}: page {self.pages} brings nothing new but is not the last"
                " (the system's paging does not advance)"
            )
        self._previous = now

    def follow(self, token: T | None) -> T:
        """The token to the next page, checked: never missing (the page was not the last), never
        one seen before in this loop."""
        if token is None or token == "":
            raise PagingError(f"{self.what}: page {self.pages} is not the last but has no next")
        if token in self._tokens:
            raise PagingError(
                f"{self.what}: page {self.pages} repeats an earlier next-page token"
                " (the system's paging loops)"
            )
        self._tokens.add(token)
        return token
