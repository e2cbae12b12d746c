"""The LakeSync sync gateway: a Litestar app serving docs/protocol.md §5 (HTTP) and §9 (WebSocket).

Layout: ``lakesync.api.app.create_app`` builds the app; ``lakesync.api.controllers`` hold thin
handlers (decode, authenticate with ``lakesync.api.auth``, call a service, encode);
``lakesync.api.services.sync.SyncService`` does push/pull/admin work, ``lakesync.views`` decides
what a client may see and write under sync rules (pure), ``lakesync.api.services.hub`` fans out
WebSocket broadcasts; ``lakesync.api.store`` is the durable hot log (``HotLog``: SQLite embedded,
PostgreSQL shared); ``lakesync.api.errors`` maps the one LakeSync exception tree to HTTP;
``lakesync.api.settings`` is the typed settings object; ``lakesync.api.cli.up`` serves it with
uvicorn.
"""
