"""The SQL endpoint's front door (:mod:`lakesync.lakehouse.hive_proxy`): Thrift calls decoded from
bytes that real HiveServer2 calls were written to (PyHive's ``TCLIService``), a refusal read back
as the client reads it, and the door itself between PyHive and a fake Thrift server that records
what reaches it (no JVM)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyhive import hive
from TCLIService import TCLIService, ttypes
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport.TTransport import TMemoryBuffer, TTransportException

from lakesync.errors import AuthError
from lakesync.lakehouse.hive_proxy import (
    HiveProxy,
    _encode,
    _refusal,
    sasl_message,
    thrift_call,
)
from tests.gateway_process import free_port

V8 = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V8
BINARY_GUID = b"\xc0\xff\xee\x00\x80\xfe" + bytes(range(250, 256)) + b"\xff\xfe\xfd\xfc"


def _write(name: str, kind: int, seqid: int, body: Any) -> bytes:
    """A Thrift message as a client library writes it."""
    buffer = TMemoryBuffer()
    proto = TBinaryProtocol(buffer)
    proto.writeMessageBegin(name, kind, seqid)
    body.write(proto)
    proto.writeMessageEnd()
    return bytes(buffer.getvalue())


def _read(data: bytes, result: Any) -> tuple[str, int, int, Any]:
    """A Thrift message read back as a client library reads it."""
    proto = TBinaryProtocol(TMemoryBuffer(data))
    name, kind, seqid = proto.readMessageBegin()
    if kind == TMessageType.EXCEPTION:
        body: Any = TApplicationException()
    else:
        body = result
    body.read(proto)
    proto.readMessageEnd()
    return name, kind, seqid, body


def _session() -> Any:
    return ttypes.TSessionHandle(ttypes.THandleIdentifier(guid=BINARY_GUID, secret=BINARY_GUID))


def _execute(statement: str, seqid: int = 7) -> bytes:
    req = ttypes.TExecuteStatementReq(sessionHandle=_session(), statement=statement,
                                      confOverlay={"spark.sql.runSQLOnFiles": "true"})
    return _write("ExecuteStatement", TMessageType.CALL, seqid,
                  TCLIService.ExecuteStatement_args(req=req))


def _open_session(seqid: int = 1) -> bytes:
    req = ttypes.TOpenSessionReq(client_protocol=V8, username="ana", password="a-token",
                                 configuration={"use:database": "analytics"})
    return _write("OpenSession", TMessageType.CALL, seqid, TCLIService.OpenSession_args(req=req))


def _fetch_results(seqid: int = 9) -> bytes:
    handle = ttypes.TOperationHandle(
        operationId=ttypes.THandleIdentifier(guid=BINARY_GUID, secret=BINARY_GUID[::-1]),
        operationType=ttypes.TOperationType.EXECUTE_STATEMENT, hasResultSet=True)
    req = ttypes.TFetchResultsReq(operationHandle=handle, orientation=0, maxRows=1000)
    return _write("FetchResults", TMessageType.CALL, seqid, TCLIService.FetchResults_args(req=req))


# -- thrift_call -----------------------------------------------------------------------------


def test_an_execute_statement_is_decoded() -> None:
    data = _execute("select 1", seqid=7)
    call = thrift_call(data)
    assert call is not None
    assert (call.name, call.seqid, call.raw) == ("ExecuteStatement", 7, data)
    assert call.args.req.statement == "select 1"
    assert call.args.req.confOverlay == {"spark.sql.runSQLOnFiles": "true"}


def test_an_open_session_is_decoded() -> None:
    data = _open_session(seqid=1)
    call = thrift_call(data)
    assert call is not None
    assert (call.name, call.seqid, call.raw) == ("OpenSession", 1, data)
    req = call.args.req
    assert (req.username, req.password, req.configuration) == (
        "ana", "a-token", {"use:database": "analytics"})


def test_a_call_with_binary_handles_is_passed_whole_and_undecoded() -> None:
    data = _fetch_results(seqid=9)
    with pytest.raises(UnicodeDecodeError):
        BINARY_GUID.decode()
    call = thrift_call(data)
    assert call is not None
    assert (call.name, call.seqid, call.args, call.raw) == ("FetchResults", 9, None, data)


@pytest.mark.parametrize("data", [_execute("select 1"), _open_session(), _fetch_results()],
                         ids=["ExecuteStatement", "OpenSession", "FetchResults"])
def test_every_prefix_of_a_call_is_partial(data: bytes) -> None:
    for end in range(len(data)):
        assert thrift_call(data[:end]) is None, end


def test_the_first_of_two_calls_comes_with_its_own_bytes() -> None:
    first, second = _fetch_results(seqid=1), _execute("select 2", seqid=2)
    call = thrift_call(first + second)
    assert call is not None
    assert (call.name, call.seqid, call.raw) == ("FetchResults", 1, first)
    rest = thrift_call((first + second)[len(call.raw):])
    assert rest is not None
    assert (rest.name, rest.seqid, rest.raw) == ("ExecuteStatement", 2, second)


@pytest.mark.parametrize("data", [
    b"\x80\x02\x00\x01" + bytes(32),  # binary protocol version 2
    b"\xff" * 64,
    # A reply where a call belongs.
    _write("ExecuteStatement", TMessageType.REPLY, 1, TCLIService.ExecuteStatement_result(
        success=ttypes.TExecuteStatementResp(status=ttypes.TStatus(statusCode=0)))),
    # A call whose struct holds a field of an unknown type id.
    _write("GetInfo", TMessageType.CALL, 1, TCLIService.CloseSession_args())[:-1] + b"\x63\x00\x01",
    # Not Thrift at all: an HTTP request (the old unversioned form would read a name length).
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
], ids=["version", "0xff", "reply", "bad-type", "http"])
def test_garbage_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        thrift_call(data)


@given(st.binary(max_size=200))
def test_any_bytes_are_a_call_partial_or_a_value_error(data: bytes) -> None:
    try:
        call = thrift_call(data)
    except ValueError:
        return
    if call is not None:
        assert data.startswith(call.raw)


@given(st.text(max_size=200), st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_any_statement_decodes_as_written(statement: str, seqid: int) -> None:
    data = _execute(statement, seqid)
    call = thrift_call(data + b"\x00\x00\x00")
    assert call is not None
    assert (call.name, call.seqid, call.raw, call.args.req.statement) == (
        "ExecuteStatement", seqid, data, statement)


# -- refusals and encoding -------------------------------------------------------------------


def test_a_refused_statement_reads_back_as_an_error_status() -> None:
    call = thrift_call(_execute("select reflect('a', 'b')", seqid=42))
    assert call is not None
    name, kind, seqid, result = _read(_refusal(call, "refused: no"),
                                      TCLIService.ExecuteStatement_result())
    assert (name, kind, seqid) == ("ExecuteStatement", TMessageType.REPLY, 42)
    status = result.success.status
    assert status.statusCode == ttypes.TStatusCode.ERROR_STATUS
    assert status.errorMessage == "refused: no"
    assert status.sqlState == "42000"
    assert result.success.operationHandle is None


def test_a_refused_session_keeps_the_clients_protocol() -> None:
    call = thrift_call(_open_session(seqid=3))
    assert call is not None
    name, kind, seqid, result = _read(_refusal(call, "not that database"),
                                      TCLIService.OpenSession_result())
    assert (name, kind, seqid) == ("OpenSession", TMessageType.REPLY, 3)
    assert result.success.status.statusCode == ttypes.TStatusCode.ERROR_STATUS
    assert result.success.status.errorMessage == "not that database"
    assert result.success.serverProtocolVersion == V8
    assert result.success.sessionHandle is None


def test_another_refused_call_is_an_application_exception() -> None:
    req = ttypes.TGetDelegationTokenReq(sessionHandle=_session(), owner="a", renewer="b")
    call = thrift_call(_write("GetDelegationToken", TMessageType.CALL, 5,
                              TCLIService.GetDelegationToken_args(req=req)))
    assert call is not None
    name, kind, seqid, error = _read(_refusal(call, "not served"), None)
    assert (name, kind, seqid) == ("GetDelegationToken", TMessageType.EXCEPTION, 5)
    assert (error.type, error.message) == (TApplicationException.UNKNOWN_METHOD, "not served")


def test_encode_writes_what_a_client_library_writes() -> None:
    call = thrift_call(_execute("select 1", seqid=11))
    assert call is not None
    assert _encode("ExecuteStatement", TMessageType.CALL, 11, call.args) == call.raw


@pytest.mark.parametrize(("status", "payload", "expected"), [
    (1, b"PLAIN", b"\x01\x00\x00\x00\x05PLAIN"),
    (5, b"", b"\x05\x00\x00\x00\x00"),
    (4, b"x" * 300, b"\x04\x00\x00\x01\x2c" + b"x" * 300),
])
def test_sasl_message(status: int, payload: bytes, expected: bytes) -> None:
    assert sasl_message(status, payload) == expected


# -- the door between PyHive and a fake Thrift server ----------------------------------------

KEY = "backend-key-of-this-start"
GOOD = "good-token"
_SUCCESS = ttypes.TStatus(statusCode=ttypes.TStatusCode.SUCCESS_STATUS)


@dataclass
class FakeThriftServer:
    """A Thrift server on loopback that signs in one SASL PLAIN client at a time, records the
    sign-ins and calls it receives and answers each with a success."""

    port: int = 0
    sign_ins: list[tuple[str, str]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            try:
                self._sign_in(conn, stream)
                while True:
                    (length,) = struct.unpack(">I", _exactly(stream, 4))
                    reply = self._answer(_exactly(stream, length))
                    conn.sendall(struct.pack(">I", len(reply)) + reply)
            except (EOFError, OSError):
                return

    def _sign_in(self, conn: socket.socket, stream: Any) -> None:
        for expected in (1, 2):  # START "PLAIN", then OK "\0user\0password"
            status, length = struct.unpack(">BI", _exactly(stream, 5))
            payload = _exactly(stream, length)
            assert status == expected
        _, user, password = payload.decode().split("\0")
        self.sign_ins.append((user, password))
        conn.sendall(sasl_message(5, b""))

    def _answer(self, data: bytes) -> bytes:
        proto = TBinaryProtocol(TMemoryBuffer(data))
        name, _, seqid = proto.readMessageBegin()
        args = getattr(TCLIService, f"{name}_args")()
        args.read(proto)
        self.calls.append((name, args.req))
        handle = ttypes.THandleIdentifier(guid=BINARY_GUID, secret=BINARY_GUID)
        resp: Any = getattr(ttypes, f"T{name}Resp")(status=_SUCCESS)
        if name == "OpenSession":
            resp.serverProtocolVersion = args.req.client_protocol
            resp.sessionHandle = ttypes.TSessionHandle(handle)
        elif name == "ExecuteStatement":
            resp.operationHandle = ttypes.TOperationHandle(
                handle, ttypes.TOperationType.EXECUTE_STATEMENT, hasResultSet=False)
        result = getattr(TCLIService, f"{name}_result")(success=resp)
        return _write(name, TMessageType.REPLY, seqid, result)

    def statements(self) -> list[str]:
        return [req.statement for name, req in self.calls if name == "ExecuteStatement"]


def _exactly(stream: Any, size: int) -> bytes:
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return bytes(data)


def _authenticate(user: str, password: str) -> str:
    if password != GOOD:
        raise AuthError("the token's signature does not verify")
    return f"sub-of-{user}"


@dataclass(frozen=True)
class Door:
    port: int
    backend: FakeThriftServer


@pytest.fixture
def door() -> Iterator[Door]:
    backend = FakeThriftServer()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        backend.port = listener.getsockname()[1]
        threading.Thread(target=backend.serve, args=(listener,), daemon=True).start()
        proxy = HiveProxy("127.0.0.1", free_port(), backend.port, KEY, _authenticate,
                          lambda: {"analytics", "staging"})
        proxy.start()
        try:
            yield Door(proxy.port, backend)
        finally:
            proxy.stop()


def _connect(door: Door, password: str, **kw: Any) -> Any:
    return hive.connect("127.0.0.1", door.port, username="ana", auth="LDAP", password=password,
                        database="analytics", **kw)


def test_the_backend_receives_statements_as_checked_and_never_a_refused_one(door: Door) -> None:
    with _connect(door, GOOD, configuration={"hive.server2.proxy.user": "root"}) as con:
        cursor = con.cursor()
        with pytest.raises(hive.OperationalError, match="function reflect\\(\\) is not one"):
            cursor.execute("select reflect('java.lang.System', 'getenv')")
        cursor.execute("select id from analytics.todos where done = false")
        with pytest.raises(hive.OperationalError, match="INSERT statements are not run"):
            cursor.execute("insert overwrite directory '/tmp/x' select 1")
        cursor.execute("show tables in staging")
    assert door.backend.sign_ins == [("sub-of-ana", KEY)]
    assert door.backend.statements() == [
        "USE `analytics`",  # PyHive's own, for database=
        "SELECT `id` FROM `analytics`.`todos` WHERE `done` = FALSE",
        "SHOW TABLES IN `staging`",
    ]
    opened = door.backend.calls[0]
    assert opened[0] == "OpenSession"
    assert (opened[1].username, opened[1].password, opened[1].configuration) == (
        "sub-of-ana", None, {})


def test_a_bad_password_is_refused_at_sign_in(door: Door) -> None:
    with pytest.raises(TTransportException, match="lakesync sql-server: the token's signature "
                       "does not verify"):
        _connect(door, "forged")
    with _connect(door, GOOD):  # the backend is reachable: nothing of the refused one reached it
        pass
    assert door.backend.sign_ins == [("sub-of-ana", KEY)]
