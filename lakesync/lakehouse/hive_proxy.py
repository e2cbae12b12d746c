"""The SQL endpoint's front door: HiveServer2 clients connect here, never to Spark directly.

``lakesync sql-server`` runs Spark's Thrift server on a private loopback port that lets in only
this door (a key written fresh at each start, :mod:`lakesync.lakehouse.sql_server`), and this
door on the address clients use. For each client connection it:

1. authenticates the client: SASL PLAIN (what beeline ``-n NAME -p PASSWORD``, PyHive with
   ``auth="LDAP"``/``"CUSTOM"``, DBeaver, Tableau and dbt-spark's ``thrift`` method send) with a
   JWT of the gateway's secret as the password (``authenticate``); a refusal is a SASL failure
   whose message the client shows ("Peer indicated failure: …");
2. opens its own SASL session to Spark as the token's ``sub``;
3. relays Thrift calls, checking each: a statement passes
   :func:`lakesync.sql_guard.check_statement` and Spark runs the statement *as checked*; a new
   session keeps only the settings :func:`~lakesync.sql_guard.check_session_config` allows; the
   delegation-token calls and any call this door does not know are refused. Spark's answers go
   back untouched. A token that expires ends what the connection may run.

The wire format (Thrift's SASL transport: a negotiation of ``status, length, payload``
messages, then ``length, payload`` frames; Thrift's binary protocol inside) is decoded with the
``thrift`` library and the HiveServer2 types PyHive ships (``TCLIService``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from thrift.protocol.TBinaryProtocol import TBinaryProtocol  # type: ignore[import-untyped]
from thrift.Thrift import (  # type: ignore[import-untyped]
    TApplicationException,
    TMessageType,
    TType,
)
from thrift.transport.TTransport import (  # type: ignore[import-untyped]
    TMemoryBuffer,
    TTransportException,
)

from lakesync.errors import LakeSyncError
from lakesync.sql_guard import check_session_config, check_statement

__all__ = ["Authenticate", "HiveProxy", "ThriftCall", "sasl_message", "thrift_call"]

log = logging.getLogger("lakesync.sql_server")

# Thrift's SASL transport: negotiation statuses.
START, OK, BAD, ERROR, COMPLETE = 1, 2, 3, 4, 5
_MAX_NEGOTIATION = 64 * 1024
_MAX_FRAME = 256 * 1024 * 1024
_PASSED = frozenset({
    "CloseSession", "GetInfo", "GetTypeInfo", "GetCatalogs", "GetSchemas", "GetTables",
    "GetTableTypes", "GetColumns", "GetFunctions", "GetPrimaryKeys", "GetCrossReference",
    "GetOperationStatus", "CancelOperation", "CloseOperation", "GetResultSetMetadata",
    "FetchResults", "GetLog",
})
"""Calls relayed as they are: they read the catalog or a statement's results."""

Authenticate = Callable[[str, str], str]
"""``(user, password) -> session user``, raising :class:`LakeSyncError` to refuse."""


class _ConnectionClosedError(Exception):
    """The peer went away, or sent what this door does not speak."""


def sasl_message(status: int, payload: bytes) -> bytes:
    """One SASL negotiation message: status byte, 4-byte big-endian length, payload."""
    return struct.pack(">BI", status, len(payload)) + payload


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@dataclass(frozen=True)
class ThriftCall:
    """One Thrift call decoded from a client's stream: its method, sequence id, arguments
    (decoded only for the calls this door inspects) and its raw bytes."""

    name: str
    seqid: int
    args: Any
    raw: bytes


class _BinaryProtocol(TBinaryProtocol):  # type: ignore[misc]
    """Thrift's binary protocol whose ``skip`` reads strings as bytes: the library's decodes
    them as UTF-8, and HiveServer2's handles (``guid``, ``secret``) are binary."""

    def readString(self) -> Any:  # noqa: N802  # the library's name
        return self.readBinary()


def _tcli() -> Any:
    from TCLIService import TCLIService  # type: ignore[import-untyped]  # noqa: PLC0415  # optional: pip install 'lakesync[sql]'

    return TCLIService


def thrift_call(data: bytes) -> ThriftCall | None:
    """The first whole Thrift call in ``data`` (None if ``data`` holds only part of one).

    Raises :class:`ValueError` for bytes that are not a Thrift binary-protocol call."""
    service = _tcli()
    inspected = {"OpenSession": service.OpenSession_args,
                 "ExecuteStatement": service.ExecuteStatement_args}
    if data and not data[0] & 0x80:
        # The strict binary protocol (what every HiveServer2 client sends) starts with a
        # version word; the old unversioned form would take any bytes as a method name's length.
        raise ValueError("not a Thrift binary-protocol call (no version header)")
    buffer = TMemoryBuffer(data)
    proto = TBinaryProtocol(buffer)
    try:
        name, kind, seqid = proto.readMessageBegin()
        if kind not in (TMessageType.CALL, TMessageType.ONEWAY):
            raise ValueError(f"a Thrift message of type {kind} is not a call")
        args = None
        if name in inspected:
            args = inspected[name]()
            args.read(proto)
        else:
            _BinaryProtocol(buffer).skip(TType.STRUCT)
        proto.readMessageEnd()
    except (EOFError, TTransportException, struct.error):
        return None
    except ValueError:
        raise
    except Exception as exc:  # the thrift library's protocol errors
        raise ValueError(f"not a Thrift call: {exc}") from None
    used = buffer._buffer.tell()
    return ThriftCall(name, seqid, args, data[:used])


def _encode(name: str, kind: int, seqid: int, body: Any) -> bytes:
    buffer = TMemoryBuffer()
    proto = TBinaryProtocol(buffer)
    proto.writeMessageBegin(name, kind, seqid)
    body.write(proto)
    proto.writeMessageEnd()
    return bytes(buffer.getvalue())


def _error_status(message: str) -> Any:
    from TCLIService import ttypes  # noqa: PLC0415  # optional: see _tcli

    return ttypes.TStatus(statusCode=ttypes.TStatusCode.ERROR_STATUS, errorMessage=message,
                          sqlState="42000", errorCode=0)


def _refusal(call: ThriftCall, message: str) -> bytes:
    """The reply that refuses ``call`` with ``message``: an error status where the call's
    answer has one, else a Thrift application exception."""
    from TCLIService import ttypes  # noqa: PLC0415  # optional: see _tcli

    service = _tcli()
    if call.name == "ExecuteStatement":
        body = service.ExecuteStatement_result(
            success=ttypes.TExecuteStatementResp(status=_error_status(message)))
        return _encode(call.name, TMessageType.REPLY, call.seqid, body)
    if call.name == "OpenSession":
        body = service.OpenSession_result(success=ttypes.TOpenSessionResp(
            status=_error_status(message),
            serverProtocolVersion=call.args.req.client_protocol))
        return _encode(call.name, TMessageType.REPLY, call.seqid, body)
    error = TApplicationException(TApplicationException.UNKNOWN_METHOD, message)
    return _encode(call.name, TMessageType.EXCEPTION, call.seqid, error)


class _Session:
    """One client connection's authority: who it is, and whether its token still holds."""

    def __init__(self, authenticate: Authenticate, user: str, password: str) -> None:
        self._authenticate, self._user, self._password = authenticate, user, password
        self.sub = authenticate(user, password)

    def check(self) -> None:
        """Raise :class:`LakeSyncError` once the token no longer verifies (it expired)."""
        self._authenticate(self._user, self._password)


class HiveProxy:
    """The front door on ``host:port`` before Spark's Thrift server on loopback
    ``backend_port`` (which takes ``backend_key`` as its password). ``authenticate`` checks a
    client's credentials, ``namespaces`` lists the lake's namespaces (called in a worker
    thread). ``start()`` returns once it listens; ``stop()`` closes it and every connection."""

    def __init__(
        self,
        host: str,
        port: int,
        backend_port: int,
        backend_key: str,
        authenticate: Authenticate,
        namespaces: Callable[[], Collection[str]],
    ) -> None:
        self.host, self.port = host, port
        self._backend_port, self._backend_key = backend_port, backend_key
        self._authenticate, self._namespaces = authenticate, namespaces
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Listen on ``host:port`` in a thread of its own; raises :class:`OSError` if the
        address cannot be bound."""
        self._thread = threading.Thread(target=self._run, name="sql-front-door", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        """Stop listening and close every connection."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to start()
            self._failure = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._serve, self.host, self.port)
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
            # Open connections end with the loop (asyncio.run cancels their tasks).

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        backend: asyncio.StreamWriter | None = None
        try:
            session = await self._negotiate(reader, writer)
            if session is None:
                return
            backend_reader, backend = await asyncio.open_connection(
                "127.0.0.1", self._backend_port)
            await self._backend_sign_in(backend_reader, backend, session.sub)
            lock = asyncio.Lock()
            relay = asyncio.create_task(self._relay(backend_reader, writer, lock))
            try:
                await self._inspect(reader, backend, writer, lock, session)
            finally:
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError, _ConnectionClosedError, OSError):
                    await relay
        except (_ConnectionClosedError, OSError, asyncio.IncompleteReadError) as exc:
            log.debug("sql connection from %s ended: %s", peer, exc)
        except asyncio.CancelledError:
            pass  # the door closes (stop()): the connection ends with it
        finally:
            for stream in (writer, backend):
                if stream is not None:
                    stream.close()

    async def _negotiate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Session | None:
        """The server side of SASL PLAIN; the client's session, or None once refused."""
        status, mechanism = await _read_sasl(reader)
        if status != START or mechanism != b"PLAIN":
            await _fail(writer, BAD, "the SQL endpoint takes SASL PLAIN: a user name and a "
                        "token of the gateway as the password")
            return None
        status, response = await _read_sasl(reader)
        parts = response.split(b"\0")
        if status not in (OK, COMPLETE) or len(parts) != 3:
            await _fail(writer, BAD, "malformed SASL PLAIN response")
            return None
        user, password = (p.decode("utf-8", "replace") for p in parts[1:])
        try:
            session = await asyncio.to_thread(_Session, self._authenticate, user, password)
        except LakeSyncError as exc:
            log.warning("sql connection refused (user %r): %s", user[:80], exc.message)
            await _fail(writer, ERROR, f"lakesync sql-server: {exc.message}")
            return None
        writer.write(sasl_message(COMPLETE, b""))
        await writer.drain()
        log.info("sql session opened for %s", session.sub)
        return session

    async def _backend_sign_in(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sub: str
    ) -> None:
        plain = b"\0" + sub.encode() + b"\0" + self._backend_key.encode()
        writer.write(sasl_message(START, b"PLAIN") + sasl_message(OK, plain))
        await writer.drain()
        status, payload = await _read_sasl(reader)
        if status != COMPLETE:
            raise _ConnectionClosedError(
                f"Spark's Thrift server refused the front door: {payload!r}")

    async def _relay(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lock: asyncio.Lock
    ) -> None:
        """Spark's answers back to the client, frame by frame."""
        while True:
            payload = await _read_frame(reader)
            async with lock:
                writer.write(_frame(payload))
                await writer.drain()

    async def _inspect(
        self,
        reader: asyncio.StreamReader,
        backend: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
        lock: asyncio.Lock,
        session: _Session,
    ) -> None:
        """The client's calls, each checked, then passed on, rewritten or refused."""
        pending = b""
        while True:
            pending += await _read_frame(reader)
            if len(pending) > _MAX_FRAME:
                raise _ConnectionClosedError(f"a call of more than {_MAX_FRAME} bytes")
            while pending:
                try:
                    call = thrift_call(pending)
                except ValueError as exc:
                    raise _ConnectionClosedError(str(exc)) from None
                if call is None:
                    break
                pending = pending[len(call.raw):]
                try:
                    forward = await self._decide(call, session)
                except LakeSyncError as exc:
                    log.info("sql call %s refused for %s: %s", call.name, session.sub,
                             exc.message)
                    async with lock:
                        client.write(_frame(_refusal(call, exc.message)))
                        await client.drain()
                    continue
                backend.write(_frame(forward))
                await backend.drain()

    async def _decide(self, call: ThriftCall, session: _Session) -> bytes:
        """The bytes to send Spark for ``call``; raises :class:`LakeSyncError` to refuse."""
        if call.name in _PASSED:
            return call.raw
        if call.name not in ("OpenSession", "ExecuteStatement"):
            raise LakeSyncError(f"the SQL endpoint does not serve the call {call.name}")
        await asyncio.to_thread(session.check)
        namespaces = await asyncio.to_thread(self._namespaces)
        req = call.args.req
        if call.name == "OpenSession":
            req.configuration = check_session_config(req.configuration or {}, namespaces)
            req.username, req.password = session.sub, None
        else:
            req.statement = check_statement(req.statement or "", namespaces)
            req.confOverlay = {}
        return _encode(call.name, TMessageType.CALL, call.seqid, call.args)


async def _read_sasl(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status, length = struct.unpack(">BI", await reader.readexactly(5))
    if length > _MAX_NEGOTIATION:
        raise _ConnectionClosedError(f"a SASL message of {length} bytes")
    return status, await reader.readexactly(length)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    if length > _MAX_FRAME:
        raise _ConnectionClosedError(f"a frame of {length} bytes")
    return await reader.readexactly(length)


async def _fail(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    writer.write(sasl_message(status, message.encode()))
    with contextlib.suppress(OSError):
        await writer.drain()
