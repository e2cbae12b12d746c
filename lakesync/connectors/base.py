"""The two sides of a connector: a :class:`Source` (an outside system, read in polls) and a
:class:`Sink` (the gateway it feeds, through the gateway's normal push path)."""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Protocol

from lakesync.connectors._changes import Chunk
from lakesync.delta import RowDelta
from lakesync.schema import TableSchema

__all__ = ["Chunk", "Sink", "Source"]


class Source(abc.ABC):
    """An outside system read in polls.

    :meth:`poll` yields :class:`Chunk`s of at most the connector's ``chunk_rows`` rows. A chunk's
    ``cursor`` is stored once the chunk is, and handed to the next poll (also after a restart),
    so a source resumes where its last stored chunk left it and re-reads at most the chunk it was
    in (which then changes nothing: see :mod:`lakesync.connectors._changes`).
    """

    @abc.abstractmethod
    async def schemas(self) -> Sequence[TableSchema]:
        """The gateway tables the source fills (a database source reads its columns)."""

    @abc.abstractmethod
    def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """One poll from ``cursor`` (``{}`` the first time)."""

    async def aclose(self) -> None:  # noqa: B027 - sources without resources need nothing
        """Release connections."""


class Sink(Protocol):
    """What a connector needs of its gateway."""

    async def schemas(self) -> dict[str, TableSchema]:
        """The gateway's registered table schemas, by table."""

    async def register(self, schemas: Sequence[TableSchema]) -> None:
        """Register (or evolve) table schemas."""

    async def current(self, table: str, row_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The visible columns of the live rows among ``row_ids``."""

    async def push(self, deltas: Sequence[RowDelta]) -> None:
        """Store a batch through the push path (validation, dedup, landing); raises
        :class:`~lakesync.errors.BackpressureError` when the gateway asks to wait."""

    async def row_ids(self, table: str, after: str | None, limit: int) -> list[str]:
        """The ids of ``table``'s stored rows after ``after`` (None = from the first), in id
        order, at most ``limit``."""

    async def load_cursor(self) -> dict[str, Any]:
        """The cursor stored with the last chunk (``{}`` if none)."""

    async def save_cursor(self, cursor: Mapping[str, Any]) -> None:
        """Store the cursor durably."""

    def next_hlc(self) -> int:
        """A fresh HLC of the gateway's clock."""
