"""A refusal after an answer proves nothing (RFC 9113 §8.7, RFC 9114 §4.1.1): a server that
sends a response head, then resets the stream with REFUSED_STREAM (HTTP/2) or
H3_REQUEST_REJECTED (HTTP/3), did process the request. The call fails with the evidence of the
stage it reached (``PARTIAL_RESPONSE``) and a POST is not sent again; the same reset before
any response byte is ``NOT_SENT`` and retried, as before.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence
from trio_retry.testing import FaultServer, RefuseStream, Respond
from trio_retry.testing import _h2_frames as h2f
from trio_retry.testing import _h3_frames as h3f
from trio_retry.testing._script import StreamFrames

REFUSED = {"h2c": 0x7, "h2": 0x7, "h3": 0x10B}  # REFUSED_STREAM, H3_REQUEST_REJECTED
HEAD = [(":status", "200"), ("content-length", "10")]


def head_then_part(protocol: str) -> Callable[[int], bytes]:
    """A 200 head announcing 10 bytes, and 4 of them."""
    if protocol == "h3":
        return lambda _sid: h3f.headers_frame(HEAD) + h3f.data_frame(b"part")
    return lambda sid: h2f.headers_frame(sid, HEAD) + h2f.data_frame(sid, b"part")


async def start(nursery: trio.Nursery, protocol: str) -> FaultServer:
    server = FaultServer(tls=protocol != "h2c", http2=True, http3=protocol == "h3")
    await nursery.start(server.serve)
    return server


def client_for(server: FaultServer, protocol: str) -> trio_retry.Client:
    options: dict[str, object] = {"retry": FAST}
    if protocol == "h3":
        options["upstreams"] = {server.url: trio_retry.Upstream(http3=True)}
    if protocol == "h2c":
        options["http2_prior_knowledge"] = True
    else:
        options["ssl_context"] = server.client_ssl_context()
    return trio_retry.Client(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", ["h2c", "h2", "h3"])
async def test_a_refusal_after_the_head_is_not_proof(nursery: trio.Nursery, protocol: str) -> None:
    server = await start(nursery, protocol)
    refusal = StreamFrames(head_then_part(protocol), fin=False, reset=REFUSED[protocol])
    server.route("POST", "/pay", refusal, Respond(200, body=b"again"))
    with trio.fail_after(20):
        async with client_for(server, protocol) as client:
            with pytest.raises(trio_retry.RequestFailed) as caught:  # not ambiguous: it ran
                await client.post(f"{server.url}/pay", content=b"x")
    error = caught.value
    assert error.evidence is Evidence.PARTIAL_RESPONSE
    assert [(a.evidence, a.status) for a in error.attempts] == [(Evidence.PARTIAL_RESPONSE, 200)]
    assert [r.path for r in server.requests] == ["/pay"]  # sent once


@pytest.mark.parametrize("protocol", ["h2c", "h2", "h3"])
async def test_a_refusal_before_any_byte_is_retried(nursery: trio.Nursery, protocol: str) -> None:
    server = await start(nursery, protocol)
    server.route("POST", "/pay", RefuseStream(), Respond(200, body=b"once"))
    with trio.fail_after(20):
        async with client_for(server, protocol) as client:
            response = await client.post(f"{server.url}/pay", content=b"x")
    assert (response.status_code, response.content) == (200, b"once")
    assert [a.evidence for a in response.attempts] == [
        Evidence.NOT_SENT,
        Evidence.RESPONSE_RECEIVED,
    ]
    assert [r.executed for r in server.requests] == [False, True]
