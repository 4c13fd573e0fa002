"""What the HTTP/3 client says on the wire, seen by the server (FaultServer(http3=True) on
loopback): no MAX_PUSH_ID on its control stream (it never takes a push, RFC 9114 §4.6), its
limits in its SETTINGS; and how QUIC and HTTP/3 codes read in its messages
(``_wire/http3/codes.py``)."""

from __future__ import annotations

import pytest
import trio
from aioquic.buffer import Buffer
from aioquic.h3.connection import FrameType, H3Connection, Setting
from aioquic.h3.events import H3Event
from aioquic.quic.events import QuicEvent, StreamDataReceived

import trio_retry
from trio_retry import Client, Evidence, RetryPolicy, Upstream
from trio_retry._wire.http3.codes import closed_words, tls_alert
from trio_retry._wire.http3.shims import PushlessH3Connection
from trio_retry.testing import CloseAfterBody, FaultServer, Respond

CONTROL_STREAM = 2  # the client's first unidirectional stream (RFC 9000 §2.1)


def frame_types(stream: bytes) -> list[int]:
    """The frame types on a control stream's bytes (its type, then type-length-value frames)."""
    buf = Buffer(data=stream)
    assert buf.pull_uint_var() == 0x00  # a control stream
    types = []
    while not buf.eof():
        types.append(buf.pull_uint_var())
        buf.pull_bytes(buf.pull_uint_var())
    return types


def client_control_stream(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes of the client's control stream, as FaultServer's HTTP/3 receives them (until
    the test ends)."""
    received: list[bytes] = []
    handle = H3Connection.handle_event

    def spy(self: H3Connection, event: QuicEvent) -> list[H3Event]:
        server_side = not isinstance(self, PushlessH3Connection)
        if server_side and isinstance(event, StreamDataReceived):
            if event.stream_id == CONTROL_STREAM:
                received.append(event.data)
        return handle(self, event)

    monkeypatch.setattr(H3Connection, "handle_event", spy)
    return received


async def test_the_client_advertises_no_push(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aioquic's client sends MAX_PUSH_ID 8; this one sends SETTINGS alone, so a server may
    push nothing."""
    received = client_control_stream(monkeypatch)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with Client(
            upstreams={server.url: Upstream(http3=True)}, ssl_context=server.client_ssl_context()
        ) as client:
            response = await client.get(f"{server.url}/")
    assert response.http_version == "HTTP/3"
    assert frame_types(b"".join(received)) == [FrameType.SETTINGS]


async def test_a_connection_close_reads_in_words(nursery: trio.Nursery) -> None:
    """A server closing the connection with H3_INTERNAL_ERROR: the message names it (it read
    "error 0x102")."""
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    server.route("POST", "/pay", CloseAfterBody(reset=True), Respond(200))
    with trio.fail_after(20):
        async with Client(
            upstreams={server.url: Upstream(http3=True)},
            ssl_context=server.client_ssl_context(),
            retry=RetryPolicy(max_attempts=1),
        ) as client:
            with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as caught:
                await client.post(f"{server.url}/pay", content=b"x")
    assert "H3_INTERNAL_ERROR (0x102)" in str(caught.value)
    assert "error 0x102)" not in str(caught.value)


@pytest.mark.parametrize(
    ("code", "frame_type", "reason", "words"),
    [
        (0x150, 0x06, "", "TLS alert 80 (internal error)"),
        (0x12A, 0x06, "no cert", "TLS alert 42 (bad certificate): no cert"),
        (0x178, 0x06, "", "TLS alert 120 (no application protocol)"),
        (0x1FF, 0x06, "", "TLS alert 255 (unknown alert)"),
        (0x0A, 0x00, "", "PROTOCOL_VIOLATION (0xa)"),
        (0x11, 0x00, "", "VERSION_NEGOTIATION_ERROR (0x11)"),
        (0x99, 0x00, "", "QUIC error 0x99"),
        (0x10B, None, "", "H3_REQUEST_REJECTED (0x10b)"),
        (0x150, None, "", "application error 0x150"),  # not an alert: an application close
        (0x200, None, "", "QPACK_DECOMPRESSION_FAILED (0x200)"),
        (0x0, None, "Idle timeout", "application error 0x0: Idle timeout"),
    ],
)
def test_codes_in_words(code: int, frame_type: int | None, reason: str, words: str) -> None:
    assert closed_words(code, frame_type, reason) == words


def test_only_a_transport_close_carries_an_alert() -> None:
    assert tls_alert(0x150, 0x06) == 80
    assert tls_alert(0x150, None) is None  # H3 code 0x150 in an application close
    assert tls_alert(0x0A, 0x00) is None


def settings_sent(stream: bytes) -> dict[int, int]:
    """The SETTINGS on a control stream's bytes (RFC 9114 §7.2.4.1)."""
    buf = Buffer(data=stream)
    assert buf.pull_uint_var() == 0x00  # a control stream
    assert buf.pull_uint_var() == FrameType.SETTINGS
    payload = Buffer(data=buf.pull_bytes(buf.pull_uint_var()))
    settings = {}
    while not payload.eof():
        key = payload.pull_uint_var()
        settings[key] = payload.pull_uint_var()
    return settings


async def test_the_client_advertises_its_limits_and_no_dynamic_table(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SETTINGS_MAX_FIELD_SECTION_SIZE is max_header_bytes (RFC 9114 §4.2.2), and the QPACK
    dynamic table is off (capacity 0, no blocked streams: RFC 9204 §5): what bounds the
    decoding of a field section (``shims.py``)."""
    received = client_control_stream(monkeypatch)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with Client(
            upstreams={server.url: Upstream(http3=True)},
            ssl_context=server.client_ssl_context(),
            max_header_bytes=12_345,
        ) as client:
            response = await client.get(f"{server.url}/")
    assert response.http_version == "HTTP/3"
    settings = settings_sent(b"".join(received))
    assert {key: settings.get(key) for key in (0x1, 0x6, 0x7)} == {0x1: 0, 0x6: 12_345, 0x7: 0}


async def test_an_aioquic_that_would_not_keep_the_limits_is_not_used(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shim's probe (``shims.PushlessH3Connection``): an aioquic whose SETTINGS no longer
    follow what the shim sets (here one that writes its own table capacity whatever it is
    told) is refused before a byte is sent, and the call goes over TCP."""

    def own_settings(self: H3Connection) -> dict[int, int]:
        return {Setting.QPACK_MAX_TABLE_CAPACITY: 4096, Setting.QPACK_BLOCKED_STREAMS: 16}

    monkeypatch.setattr(H3Connection, "_get_local_settings", own_settings)
    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    with trio.fail_after(20):
        async with Client(
            upstreams={server.url: Upstream(http3=True)}, ssl_context=server.client_ssl_context()
        ) as client:
            response = await client.get(f"{server.url}/")
    assert response.status_code == 200
    assert response.http_version != "HTTP/3"
    quic_try, _ = response.attempts
    assert (quic_try.http_version, quic_try.evidence) == ("HTTP/3", Evidence.NOT_SENT)
    assert "HTTP/3 is not used" in str(quic_try.error)
    assert [r.http_version for r in server.requests] == [response.http_version]


async def test_aioquic_failing_as_a_request_is_sent_fails_that_call_in_words(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request after the first is sent from its caller's task (``QuicDriver.flush``): if
    aioquic raises there, the caller gets the client's own error with the evidence of its
    stage, never aioquic's exception (the connection's task meets the same failure and ends
    the connection)."""
    from trio_retry._wire.http3.backend import CheckedQuicConnection

    server = FaultServer(tls=True, http3=True)
    await nursery.start(server.serve)
    client = Client(
        upstreams={server.url: Upstream(http3=True)},
        ssl_context=server.client_ssl_context(),
        retry=RetryPolicy(max_attempts=1),
    )
    with trio.fail_after(20):
        async with client:
            assert (await client.get(f"{server.url}/first")).http_version == "HTTP/3"

            def broken(self: CheckedQuicConnection, now: float) -> list[object]:
                raise RuntimeError("aioquic broke")

            monkeypatch.setattr(CheckedQuicConnection, "datagrams_to_send", broken)
            with pytest.raises(trio_retry.RequestFailed) as failed:
                await client.get(f"{server.url}/second")
    (attempt,) = failed.value.attempts
    assert attempt.http_version == "HTTP/3"
    assert "internal error in HTTP/3" in str(attempt.error)
    assert [r.path for r in server.requests] == ["/first"]
