"""FaultServer over HTTP/3 (QUIC on the TCP port's number), driven by aioquic's client-side
state machines over a Trio UDP socket (tests/support/h3client.py)."""

from __future__ import annotations

import ssl
import sys
from contextlib import AbstractAsyncContextManager

import pytest
import trio
from aioquic.tls import SessionTicket

from tests.support.h3client import H3TestClient, open_h3_client
from trio_retry.testing import (
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    EndlessBody,
    FaultServer,
    GoAway,
    Handler,
    PartialBody,
    Raw,
    RecordedRequest,
    RefuseStream,
    Respond,
    ScriptError,
    Stall,
)

from .conftest import StartServer
from .raw import H1Client, H2Client

H3_NO_ERROR = 0x100
H3_INTERNAL_ERROR = 0x102
H3_REQUEST_REJECTED = 0x10B
MIB = 1 << 20


async def start_h3(start_server: StartServer, **options: object) -> FaultServer:
    return await start_server(tls=True, http3=True, **options)


def client_for(
    server: FaultServer, session_ticket: SessionTicket | None = None
) -> AbstractAsyncContextManager[H3TestClient]:
    return open_h3_client(server.port, ca_pem=server.ca_pem, session_ticket=session_ticket)


async def test_get_and_post_are_recorded_as_http3(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(Respond(201, headers={"X-Test": "yes", "Connection": "close"}, body=b"made"))
    with trio.fail_after(10):
        async with client_for(server) as client:
            posted = await client.request("POST", "/items?x=1", [("x-req", "v")], b"payload")
            got = await client.request("GET", "/")
    assert (posted.status, bytes(posted.body), posted.ended) == (201, b"made", True)
    assert posted.header("x-test") == "yes"
    assert posted.header("content-length") == "4"
    assert posted.header("connection") is None  # connection-specific: dropped, as on HTTP/2
    assert (got.status, bytes(got.body)) == (200, b"ok")
    first, second = server.requests
    assert (first.method, first.path, first.body) == ("POST", "/items?x=1", b"payload")
    assert (first.http_version, first.stream_id, first.early_data) == ("HTTP/3", 0, False)
    assert first.headers[0] == (":method", "POST")
    assert first.header("x-req") == "v"
    assert first.executed
    assert (second.stream_id, second.connection_id) == (4, first.connection_id)
    assert server.executed_count() == 2
    assert server.connections_accepted == 1
    assert "h3" in repr(server)


async def test_one_mib_each_way(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    big = bytes(range(256)) * (MIB // 256)
    server.script(Respond(200, body=big[::-1]))
    with trio.fail_after(20):
        async with client_for(server) as client:
            response = await client.request("PUT", "/blob", body=big)
    assert (response.status, len(response.body), response.ended) == (200, MIB, True)
    assert bytes(response.body) == big[::-1]
    assert server.requests[0].body == big
    assert server.requests[0].executed


async def test_fifty_concurrent_streams(start_server: StartServer) -> None:
    server = await start_h3(start_server)

    def echo(request: RecordedRequest) -> Respond:
        return Respond(200, body=request.path.encode() + b":" + request.body)

    server.route("POST", "/n/{i}", echo)
    with trio.fail_after(20):
        async with client_for(server) as client:
            sids = [client.send_request("POST", f"/n/{i}", body=b"%d" % i) for i in range(50)]
            responses = [await client.response(sid) for sid in sids]
    assert [bytes(r.body) for r in responses] == [b"/n/%d:%d" % (i, i) for i in range(50)]
    assert server.executed_count("POST") == 50
    assert len({r.connection_id for r in server.requests}) == 1


async def test_informational_then_425_too_early(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(Respond(425, body=b"later", informational=(103,), delay=0.1))
    with trio.fail_after(10):
        async with client_for(server) as client:
            response = await client.request("GET", "/")
    assert response.informational == [103]
    assert (response.status, bytes(response.body)) == (425, b"later")
    assert server.requests[0].executed  # 425 is the application's answer: it ran


async def test_stall_then_respond(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(Stall(0.3, then=Respond(200, body=b"late")))
    with trio.fail_after(10):
        async with client_for(server) as client:
            start = trio.current_time()
            sid = client.send_request("POST", "/", body=b"x")
            await client.wait_until(lambda: server.requests and server.requests[0].executed)
            assert client.responses[sid].status is None  # executed, not answered yet
            response = await client.response(sid)
    assert (response.status, bytes(response.body)) == (200, b"late")
    assert trio.current_time() - start >= 0.3


@pytest.mark.parametrize("reset", [False, True], ids=["stream-reset", "connection-close"])
async def test_partial_body(start_server: StartServer, reset: bool) -> None:
    server = await start_h3(start_server)
    server.script(PartialBody(declared_length=1000, body=b"y" * 100, reset=reset))
    with trio.fail_after(10):
        async with client_for(server) as client:
            response = await client.request("GET", "/file")
            if not reset:
                # Only the stream died: the connection serves the next request.
                after = await client.request("GET", "/next")
                assert after.status == 200
            else:
                closed = await client.wait_terminated()
                assert closed.error_code == H3_INTERNAL_ERROR
    assert (response.status, response.header("content-length")) == (200, "1000")
    assert bytes(response.body) == b"y" * 100
    assert not response.ended
    if not reset:
        assert response.reset_code == H3_INTERNAL_ERROR
    assert server.requests[0].executed


@pytest.mark.parametrize(
    ("action", "executed", "code"),
    [
        (CloseBeforeRead(), False, H3_NO_ERROR),
        (CloseBeforeRead(reset=True), False, H3_INTERNAL_ERROR),
        (CloseAfterHead(), False, H3_NO_ERROR),
        (CloseAfterBody(), True, H3_NO_ERROR),
        (CloseAfterBody(reset=True), True, H3_INTERNAL_ERROR),
    ],
    ids=["before-read", "before-read-reset", "after-head", "after-body", "after-body-reset"],
)
async def test_connection_drops(
    start_server: StartServer,
    action: CloseBeforeRead | CloseAfterHead | CloseAfterBody,
    executed: bool,
    code: int,
) -> None:
    server = await start_h3(start_server)
    server.script(action)
    with trio.fail_after(10):
        async with client_for(server) as client:
            sid = client.send_request("POST", "/", body=b"body")
            closed = await client.wait_terminated()
    assert closed.error_code == code
    assert client.responses[sid].status is None
    [record] = server.requests
    assert (record.executed, record.action) == (executed, action)


async def test_refuse_stream_rejects_only_that_request(start_server: StartServer) -> None:
    server = await start_h3(start_server, http2=False)  # HTTP/3 can refuse a stream too
    server.script(RefuseStream(), Respond(200, body=b"second"))
    with trio.fail_after(10):
        async with client_for(server) as client:
            refused = await client.request("POST", "/", body=b"x")
            second = await client.request("POST", "/", body=b"y")
    assert (refused.status, refused.reset_code) == (None, H3_REQUEST_REJECTED)
    assert (second.status, bytes(second.body)) == (200, b"second")
    assert [r.executed for r in server.requests] == [False, True]


async def test_goaway_answers_requests_below_and_abandons_the_rest(
    start_server: StartServer,
) -> None:
    server = await start_h3(start_server)
    goaway = GoAway(last_stream_id=0)
    server.script(Stall(0.3, then=Respond(200, body=b"one")), goaway, Respond(500))
    with trio.fail_after(10):
        async with client_for(server) as client:
            s0 = client.send_request("GET", "/0")
            await client.wait_until(lambda: len(server.requests) == 1)
            s4 = client.send_request("GET", "/4")
            await client.wait_until(lambda: client.goaway_id is not None)
            s8 = client.send_request("GET", "/8")
            closed = await client.wait_terminated()
    assert client.goaway_id == 4  # requests at or above 4 were not processed
    assert closed.error_code == H3_NO_ERROR  # drained: closed once stream 0 was answered
    assert (client.responses[s0].status, bytes(client.responses[s0].body)) == (200, b"one")
    for sid in (s4, s8):  # no response and no reset: the GOAWAY says it all
        assert (client.responses[sid].status, client.responses[sid].reset_code) == (None, None)
    assert [(r.stream_id, r.executed) for r in server.requests] == [
        (0, True),
        (4, False),
        (8, False),  # arrived after the GOAWAY, while stream 0 was still being served
    ]
    assert all(r.action == goaway for r in server.requests[1:])
    assert server.queued == (Respond(500),)  # nothing at or above the GOAWAY took an entry


async def test_goaway_defaults_to_its_own_stream_and_runs_then(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(GoAway(then=Respond(202, body=b"last")))
    with trio.fail_after(10):
        async with client_for(server) as client:
            response = await client.request("POST", "/", body=b"x")
            await client.wait_terminated()
    assert client.goaway_id == 4
    assert (response.status, bytes(response.body)) == (202, b"last")
    assert server.requests[0].executed


async def test_close_after_sends_goaway_and_drains(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(Respond(200, body=b"bye", close_after=True))
    with trio.fail_after(10):
        async with client_for(server) as client:
            response = await client.request("GET", "/")
            closed = await client.wait_terminated()
    assert (bytes(response.body), client.goaway_id, closed.error_code) == (b"bye", 4, H3_NO_ERROR)


async def test_a_stall_longer_than_the_idle_timeout_keeps_the_connection(
    start_server: StartServer,
) -> None:
    server = await start_h3(start_server, idle_timeout=0.6)
    server.script(Stall(1.5, then=Respond(200, body=b"still here")))
    with trio.fail_after(10):
        async with client_for(server) as client:
            response = await client.request("GET", "/")
            assert client.terminated is None
            closed = await client.wait_terminated()  # idle now: QUIC's idle timeout ends it
    assert (response.status, bytes(response.body)) == (200, b"still here")
    # No CONNECTION_CLOSE came: aioquic reports its own idle timeout so.
    assert closed.reason_phrase == "Idle timeout"


async def test_expect_100_continue(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    with trio.fail_after(10):
        async with client_for(server) as client:
            sid = client.send_request("PUT", "/", [("expect", "100-continue")], end_stream=False)
            response = client.responses[sid]
            await client.wait_until(lambda: bool(response.informational))
            assert not server.requests[0].executed
            client.send_body(sid, b"body")
            await client.response(sid)
    assert (response.informational, response.status) == ([100], 200)
    assert server.requests[0].body == b"body"


async def test_a_stalled_upload_is_cancelled_and_not_executed(start_server: StartServer) -> None:
    server = await start_h3(start_server, read_timeout=0.3)
    with trio.fail_after(10):
        async with client_for(server) as client:
            stalled = client.send_request("POST", "/", body=b"", end_stream=False)
            client.send_body(stalled, b"part", end_stream=False)
            response = await client.response(stalled)
            after = await client.request("GET", "/next")  # only that stream was given up
    assert response.reset_code == 0x10C  # H3_REQUEST_CANCELLED
    assert after.status == 200
    assert (server.requests[0].executed, server.requests[0].body) == (False, b"part")


async def test_handlers_decide_and_refusals_stay_unexecuted(start_server: StartServer) -> None:
    server = await start_h3(start_server)

    async def decide(request: RecordedRequest) -> Respond | RefuseStream:
        await trio.sleep(0)
        return RefuseStream() if request.body == b"no" else Respond(200, body=request.body[::-1])

    server.route("POST", "/h", Handler(decide, times=2))
    with trio.fail_after(10):
        async with client_for(server) as client:
            answered = await client.request("POST", "/h", body=b"abc")
            refused = await client.request("POST", "/h", body=b"no")
    assert bytes(answered.body) == b"cba"
    assert refused.reset_code == H3_REQUEST_REJECTED
    assert [r.executed for r in server.requests] == [True, False]
    assert server.requests[1].action == RefuseStream()


async def test_endless_body_until_the_client_cancels(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(EndlessBody(chunk=b"z" * 4096, rate=400_000.0))
    with trio.fail_after(10):
        async with client_for(server) as client:
            sid = client.send_request("GET", "/stream")
            response = client.responses[sid]
            await client.wait_until(lambda: len(response.body) >= 64 * 1024)
            client.reset(sid)
            after = await client.request("GET", "/next")  # the connection carries on
    assert (response.status, response.header("content-length"), response.ended) == (
        200,
        None,
        False,
    )
    assert after.status == 200
    assert server.requests[0].executed


async def test_raw_is_a_script_error_on_http3() -> None:
    server = FaultServer(tls=True, http3=True)
    server.script(Raw(b"garbage"))
    with trio.fail_after(10), pytest.RaisesGroup(ScriptError, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            async with client_for(server) as client:
                await client.request("GET", "/")
                await trio.sleep_forever()
    assert not server.requests[0].executed


async def _ticket(server: FaultServer) -> H3TestClient:
    async with client_for(server) as client:
        await client.request("GET", "/first")
        await client.wait_until(lambda: bool(client.tickets))
    return client


async def test_early_data_accepted(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    with trio.fail_after(10):
        first = await _ticket(server)
        async with client_for(server, session_ticket=first.tickets[-1]) as client:
            sid = client.send_request("GET", "/early")  # before the handshake: 0-RTT
            response = await client.response(sid)
            handshake = await client.wait_handshake()
    assert (handshake.session_resumed, handshake.early_data_accepted) == (True, True)
    assert response.status == 200
    early = server.requests[-1]
    assert (early.path, early.early_data, early.executed) == ("/early", True, True)
    assert not server.requests[0].early_data


async def test_early_data_rejected(start_server: StartServer) -> None:
    server = await start_h3(start_server, accept_early_data=False)
    with trio.fail_after(10):
        first = await _ticket(server)
        async with client_for(server, session_ticket=first.tickets[-1]) as client:
            sid = client.send_request("GET", "/early")
            handshake = await client.wait_handshake()
            response = await client.response(sid)  # QUIC sent it again after the handshake
    assert (handshake.session_resumed, handshake.early_data_accepted) == (False, False)
    assert response.status == 200
    assert [(r.path, r.early_data) for r in server.requests] == [
        ("/first", False),
        ("/early", False),
    ]


async def test_accept_early_data_can_change_between_connections(
    start_server: StartServer,
) -> None:
    server = await start_h3(start_server)
    with trio.fail_after(10):
        first = await _ticket(server)
        server.accept_early_data = False
        async with client_for(server, session_ticket=first.tickets[-1]) as client:
            await client.request("GET", "/x")
            assert not (await client.wait_handshake()).early_data_accepted
    assert not server.requests[-1].early_data


async def test_http3_needs_tls() -> None:
    with pytest.raises(ValueError, match="http3"):
        FaultServer(http3=True)


async def test_http3_without_aioquic_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # What importing the HTTP/3 endpoint does without aioquic: ImportError.
    monkeypatch.setitem(sys.modules, "trio_retry.testing._h3", None)
    with pytest.raises(ImportError, match=r"trio_retry\[http3\]"):
        FaultServer(tls=True, http3=True)


async def test_ca_pem_is_the_authority_of_the_tls_context(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    # The system's authorities are there too (a default context): ours is among them.
    authorities = server.client_ssl_context().get_ca_certs(binary_form=True)
    assert server.ca_pem in [ssl.DER_cert_to_PEM_cert(der).encode() for der in authorities]
    with pytest.raises(RuntimeError, match="tls=False"):
        _ = FaultServer().ca_pem


# -- Alt-Svc: how a client discovers HTTP/3 over TCP ------------------------------------------


async def test_tcp_responses_advertise_http3(start_server: StartServer) -> None:
    server = await start_h3(start_server)
    server.script(Respond(200), PartialBody(), Respond(200))
    expected = f'h3=":{server.port}"; ma=86400'
    assert server.alt_svc_value == expected
    with trio.fail_after(10):
        h1 = await H1Client.open(server)
        first = await h1.request("GET", "/")
        h2 = await H2Client.open(server)
        partial = await h2.response(await h2.request("GET", "/"))
        final = await h2.response(await h2.request("GET", "/"))
    assert first.header("alt-svc") == expected
    assert partial.header("alt-svc") == expected  # every final head, faults included
    assert final.header("alt-svc") == expected


@pytest.mark.parametrize("options", [{"alt_svc": False}, {"http3": False}], ids=["off", "no-h3"])
async def test_no_advertisement(start_server: StartServer, options: dict[str, bool]) -> None:
    server = await start_server(tls=True, **{"http3": True, **options})
    assert server.alt_svc_value is None
    with trio.fail_after(10):
        h1 = await H1Client.open(server)
        response = await h1.request("GET", "/")
        h2 = await H2Client.open(server)
        streamed = await h2.response(await h2.request("GET", "/"))
    assert response.header("alt-svc") is None
    assert streamed.header("alt-svc") is None
