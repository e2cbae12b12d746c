"""The LakeSync sync gateway: a Litestar app serving docs/protocol.md §5 (HTTP) and §9 (WebSocket).

Layout: ``lakesync.api.app.create_app`` builds the app; ``lakesync.api.controllers`` hold thin
handlers (decode, authenticate with ``lakesync.api.auth``, call a service, encode);
``lakesync.api.services.sync.SyncService`` does push/pull/admin work, ``lakesync.views`` decides
what a client may see and write under sync rules (pure), ``lakesync.api.services.hub`` fans out
WebSocket broadcasts; the durable hot log is the layer below (``lakesync.hotlog``: SQLite
embedded, PostgreSQL shared), each service taking the port of :mod:`lakesync.hotlog.ports` it
uses; ``lakesync.api.errors`` maps the one LakeSync exception tree to HTTP;
``lakesync.api.settings`` is the typed settings object; ``lakesync.api.cli.up`` (the composition
root: the store, the lake's jobs and the app on it) serves it with uvicorn.
"""
