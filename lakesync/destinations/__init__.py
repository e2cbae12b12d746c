"""Destinations: the databases synced tables are shipped to (docs/protocol.md §11).

Pure statement building lives in :mod:`lakesync.destinations.statements` (sqlglot ASTs per
dialect); the adapters behind :class:`lakesync.destinations.base.Destination` are the I/O edges:
PostgreSQL and MySQL/MariaDB (:mod:`lakesync.destinations.sql`), BigQuery
(:mod:`lakesync.destinations.bigquery`) and the lake's own Iceberg catalog
(:mod:`lakesync.destinations.lake`), each a kind in the registry of
:mod:`lakesync.destinations.factory`, which opens one from a ``destinations:`` declaration. A
destination ships a table end to end (:meth:`~lakesync.destinations.base.Destination.ship`);
routing, fan-out and hot/cold tiering are composite destinations
(:mod:`lakesync.destinations.routing`, failures counted in :mod:`lakesync.destinations.metrics`),
built from a declaration's ``routes``, ``secondaries`` and ``hot_window`` by
:func:`lakesync.destinations.routing.open_declared`.
"""
