"""The hot log: the durable log of accepted deltas and the merged row state, below both the
gateway (:mod:`lakesync.api`) and the lakehouse (:mod:`lakesync.lakehouse`).

Its consumers take the role ports of :mod:`lakesync.hotlog.ports`; :class:`HotLog`
(:mod:`lakesync.hotlog.base`) is all of them, implemented on SQLite (:mod:`lakesync.hotlog.sqlite`,
embedded) and PostgreSQL (:mod:`lakesync.hotlog.postgres`, shared by several gateway processes),
and :func:`lakesync.hotlog.factory.open_store` opens the one a store URL names. Importing this
package loads neither driver: the lake's jobs import the ports without the gateway's extra.
"""
