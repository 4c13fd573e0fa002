"""SPEC §17: internationalised host names on the wire (IDNA A-labels), and a URL's userinfo."""

from __future__ import annotations

import pytest

import trio_retry
from trio_retry.testing import MockTransport, Respond


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_an_international_host_is_sent_as_its_a_label(scheme: str) -> None:
    transport = MockTransport()
    transport.server.default = Respond(200, body=b"ok")
    async with trio_retry.Client(transport=transport) as client:
        response = await client.get(f"{scheme}://bücher.example:8080/p")
    [request] = transport.server.requests
    authority = request.header("host") or request.header(":authority")  # HTTP/2 over TLS
    assert authority == "xn--bcher-kva.example:8080"  # never raw UTF-8
    [target] = transport.connects
    assert target.host == "xn--bcher-kva.example"  # what DNS, SNI and the certificate check see
    assert str(response.url) == f"{scheme}://xn--bcher-kva.example:8080/p"


async def test_a_host_that_cannot_be_encoded_sends_nothing() -> None:
    transport = MockTransport()
    async with trio_retry.Client(transport=transport) as client:
        with pytest.raises(trio_retry.InvalidRequest) as caught:
            await client.get("http://☃.net/")
    assert caught.value.evidence is trio_retry.Evidence.NOT_SENT
    assert transport.connects == []
