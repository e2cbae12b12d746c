"""Cursor marks of the SaaS sources: their timestamps (``2026-01-01T10:00:00.000+0000``, the
form Jira's ``updated`` and Salesforce's ``LastModifiedDate`` share) and the later of two."""

from __future__ import annotations

from datetime import datetime

__all__ = ["API_TIME", "later", "parse_time"]

API_TIME = "%Y-%m-%dT%H:%M:%S.%f%z"


def parse_time(text: str) -> datetime:
    """An API timestamp as an aware datetime."""
    return datetime.strptime(text, API_TIME)


def later(a: str | None, b: str | None) -> str | None:
    """The later of two API timestamps (None counts as no mark)."""
    if a is None or b is None:
        return a or b
    return a if parse_time(a) >= parse_time(b) else b
