"""Destinations: the databases synced tables are materialised into (SPEC §11).

Pure statement building lives in :mod:`lakesync.destinations.statements` (sqlglot ASTs per
dialect); the
adapters behind :class:`lakesync.destinations.base.Destination` are the I/O edges: PostgreSQL and
MySQL/MariaDB (:mod:`lakesync.destinations.sql`), BigQuery (:mod:`lakesync.destinations.bigquery`)
and the lake's
own Iceberg catalog (:mod:`lakesync.destinations.lake`), opened from a ``destinations:``
declaration by
:func:`lakesync.destinations.factory.open_destination`; composite and fan-out destinations
(:mod:`lakesync.destinations.routing`, failures counted in :mod:`lakesync.destinations.metrics`)
are built from a
declaration's ``routes`` and ``secondaries`` by :func:`lakesync.destinations.routing.open_declared`.
"""
