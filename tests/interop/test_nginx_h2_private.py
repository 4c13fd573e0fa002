"""nginx over HTTP/2 with the fast path turned off by ``h2_private``'s probe (a name of h2's
missing, simulated as in ``tests/wire/test_h2_private.py``): every call goes through plain
h2, and nginx's access log has each executed once."""

from __future__ import annotations

import trio

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.h2_fast_path import fast_path_off as fast_path_off
from trio_retry._wire.http2.fast import FastMachine


async def test_nginx_over_plain_h2_when_the_probe_fails(
    nginx: StartNginx, fast_path_off: list[FastMachine]
) -> None:
    server = nginx()
    ids = [f"p{i}" for i in range(16)]
    async with trio_retry.Client(http2=True, ssl_context=server.ssl_context()) as client:

        async def get(request_id: str) -> None:
            response = await client.get(server.h2_url("/get"), headers={"x-request-id": request_id})
            assert (response.status, response.http_version) == (200, "HTTP/2")

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for request_id in ids:
                    nursery.start_soon(get, request_id)
        assert fast_path_off, "no HTTP/2 connection was made"
        assert not any(machine.fast or machine.handed_over for machine in fast_path_off)
    executed = server.log(expect=len(ids)).by_request_id()
    assert executed == dict.fromkeys(ids, 1)
