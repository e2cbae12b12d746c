"""The LakeSync sync gateway: a Litestar app serving SPEC §5 (HTTP) and §9 (WebSocket).

Layout: ``api.app.create_app`` builds the app; ``api.controllers`` hold thin handlers (decode,
authenticate with ``api.auth``, call a service, encode); ``api.services.sync.SyncService`` does
push/pull/admin work, ``lakesync.views`` decides what a client may see and write under
sync rules (pure), ``api.services.hub`` fans out WebSocket broadcasts; ``api.store`` is the
durable hot log (``HotLog``: SQLite embedded, PostgreSQL shared); ``api.errors`` maps the one
LakeSync exception tree to HTTP; ``api.settings`` is the typed settings object; ``api.cli.up``
serves it with uvicorn.
"""
