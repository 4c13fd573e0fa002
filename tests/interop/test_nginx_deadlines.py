"""Deadlines and stage timeouts without a cancel scope (``_wire/clock.py``), against nginx:
a call deadline mid-body on a reused connection (HTTP/1.1 and HTTP/2, with a sibling stream
answered meanwhile), and a first-byte timeout behind a ``proxy_pass`` to a backend that never
answers; and a healthy slow endpoint behind ``proxy_pass``, answered once within the call
deadline although it is slower than the default first-byte limit (issue #38 row 3). Counted in
nginx's own log and, for the slow endpoint, by the backend."""

from __future__ import annotations

from unittest import mock

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from trio_retry import Evidence, FailureCategory, Stage, StageTimeouts
from trio_retry._wire.clock import Default
from trio_retry._wire.http2.connection import HTTP2Connection
from trio_retry.testing import FaultServer, Respond, Stall

BIG = 256 * 1024
LOCATIONS = """root {{workdir}}/html;
    location /big.bin { limit_rate 8k; }
    location /small.txt { }
    location /stall { proxy_pass http://{{host}}:{{backend}}; proxy_read_timeout 60s; }"""
SERVERS = f"""
  server {{ listen {{{{host}}}}:{{{{slow}}}}; {LOCATIONS} }}
  server {{ listen {{{{host}}}}:{{{{slow_h2_tls}}}} ssl http2; {{{{tls}}}} {LOCATIONS} }}
"""


async def _silent_backend(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Accepts connections and never answers (bounded: 30 s each)."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    async with listener:
        task_status.started(listener.socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()

                async def hold(stream: trio.SocketStream = stream) -> None:
                    async with stream:
                        await trio.sleep(30)

                nursery.start_soon(hold)


async def test_deadline_and_first_byte_lanes_against_nginx(nginx: StartNginx) -> None:
    async with trio.open_nursery() as nursery:
        backend = await nursery.start(_silent_backend)
        server = nginx(
            servers=SERVERS,
            listeners=("slow", "slow_h2_tls"),
            values={"backend": backend},
            files={"html/big.bin": b"b" * BIG, "html/small.txt": b"small\n"},
        )
        base = server.url("slow", "")
        one = trio_retry.RetryPolicy(max_attempts=1)
        async with trio_retry.Client(
            retry=one, stage_timeouts=StageTimeouts(first_byte=0.5)
        ) as client:
            warm = await client.get(base + "/small.txt", headers={"x-request-id": "warm"})
            assert warm.content == b"small\n"
            # 256 KiB at 8 KiB/s would take half a minute: the deadline ends it after 0.4 s.
            with trio.fail_after(10):
                start = trio.current_time()
                with pytest.raises(trio_retry.DeadlineExceeded) as info:
                    await client.get(
                        base + "/big.bin", deadline=0.4, headers={"x-request-id": "big"}
                    )
                assert trio.current_time() - start >= 0.4
            (attempt,) = info.value.attempts
            assert attempt.connection_reused  # on the lane: the ready connection, no scope
            assert (attempt.stage, attempt.evidence, attempt.category) == (
                Stage.RESPONSE_BODY,
                Evidence.PARTIAL_RESPONSE,
                FailureCategory.TIMEOUT,
            )
            # Behind proxy_pass, the backend never answers: the first-byte lane ends it.
            with trio.fail_after(10), pytest.raises(trio_retry.DeadlineExceeded) as stalled:
                await client.get(base + "/stall", headers={"x-request-id": "stall"})
            (attempt,) = stalled.value.attempts
            assert (attempt.stage, attempt.evidence, attempt.category) == (
                Stage.AWAITING_RESPONSE,
                Evidence.SENT_NO_RESPONSE,
                FailureCategory.TIMEOUT,
            )
            # The same over HTTP/2: the lane fails the one stream; the connection stays.
            h2_base = server.url("slow_h2_tls", "")
            async with trio_retry.Client(
                retry=one,
                stage_timeouts=StageTimeouts(first_byte=0.5),
                ssl_context=server.ssl_context(),
            ) as h2_client:
                await h2_client.get(h2_base + "/small.txt", headers={"x-request-id": "h2-warm"})
                with trio.fail_after(10), pytest.raises(trio_retry.DeadlineExceeded) as h2_info:
                    await h2_client.get(h2_base + "/stall", headers={"x-request-id": "h2-stall"})
                h2_after = await h2_client.get(
                    h2_base + "/small.txt", headers={"x-request-id": "h2-after"}
                )
                # A call deadline on the warm HTTP/2 connection rides the lane: it fails the
                # one stream mid-body, while a sibling on the same connection is answered.
                sibling: dict[str, trio_retry.Response] = {}

                async def call_sibling() -> None:
                    await trio.sleep(0.2)  # while the big body trickles in
                    sibling["r"] = await h2_client.get(
                        h2_base + "/small.txt", headers={"x-request-id": "h2-sibling"}
                    )

                with (
                    mock.patch.object(
                        HTTP2Connection,
                        "attempt_expired",
                        autospec=True,
                        side_effect=HTTP2Connection.attempt_expired,
                    ) as expired,
                    trio.fail_after(10),
                ):
                    async with trio.open_nursery() as calls:
                        calls.start_soon(call_sibling)
                        with pytest.raises(trio_retry.DeadlineExceeded) as h2_big:
                            await h2_client.get(
                                h2_base + "/big.bin",
                                deadline=0.4,
                                headers={"x-request-id": "h2-big"},
                            )
                assert expired.call_count == 1
            (h2_attempt,) = h2_info.value.attempts
            assert (h2_attempt.http_version, h2_attempt.evidence, h2_attempt.category) == (
                "HTTP/2",
                Evidence.SENT_NO_RESPONSE,
                FailureCategory.TIMEOUT,
            )
            assert h2_after.attempts[0].connection_reused
            (big_attempt,) = h2_big.value.attempts
            assert big_attempt.connection_reused
            assert (big_attempt.stage, big_attempt.evidence, big_attempt.category) == (
                Stage.RESPONSE_BODY,
                Evidence.PARTIAL_RESPONSE,
                FailureCategory.TIMEOUT,
            )
            assert sibling["r"].content == b"small\n"
            after = await client.get(base + "/small.txt", headers={"x-request-id": "after"})
            assert after.status == 200
            assert not after.attempts[0].connection_reused  # the timed-out ones were closed
        log = server.log(expect=9)
        nursery.cancel_scope.cancel()
    by_id = {entry.request_id: entry for entry in log.entries}
    assert set(by_id) == {
        *("warm", "big", "stall", "after"),
        *("h2-warm", "h2-stall", "h2-after", "h2-big", "h2-sibling"),
    }
    assert 0 < by_id["big"].body_bytes_sent < BIG  # nginx saw the client leave mid-body
    assert by_id["stall"].status == 499  # nginx: the client closed before the answer
    assert by_id["after"].connection != by_id["big"].connection
    assert by_id["h2-stall"].status == 499  # the stream was reset, nginx logged it
    assert by_id["h2-after"].connection == by_id["h2-stall"].connection
    assert 0 < by_id["h2-big"].body_bytes_sent < BIG  # its stream was reset mid-body
    assert by_id["h2-sibling"].connection == by_id["h2-big"].connection


#: The slow endpoint, scaled from "35 s, with a 30 s default first_byte and deadline=60": it
#: answers after SLOW seconds, the default is SCALED_DEFAULT, the deadline 4 s.
SLOW = 1.5
SCALED = StageTimeouts(connect=Default(5.0), tls=Default(5.0), first_byte=Default(0.8))
SLOW_SERVERS = """
  server { listen {{host}}:{{slow}};
           location / { proxy_pass http://{{host}}:{{backend}}; proxy_read_timeout 60s; } }
  server { listen {{host}}:{{slow_h2_tls}} ssl http2; {{tls}}
           location / { proxy_pass http://{{host}}:{{backend}}; proxy_read_timeout 60s; } }
"""


async def test_a_slow_endpoint_behind_nginx_is_answered_once_within_the_deadline(
    nginx: StartNginx,
) -> None:
    async with trio.open_nursery() as nursery:
        backend = FaultServer(http2=False)
        backend.default = Stall(SLOW, Respond(200, body=b"slow but fine"))
        await nursery.start(backend.serve)
        server = nginx(
            servers=SLOW_SERVERS,
            listeners=("slow", "slow_h2_tls"),
            values={"backend": backend.port},
        )
        answered: dict[str, tuple[int, float, int]] = {}
        for name, base, options in (
            ("h1", server.url("slow", ""), {}),
            ("h2", server.url("slow_h2_tls", ""), {"ssl_context": server.ssl_context()}),
        ):
            async with trio_retry.Client(stage_timeouts=SCALED, **options) as client:
                with trio.fail_after(10):
                    start = trio.current_time()
                    response = await client.get(
                        base + f"/{name}", deadline=4, headers={"x-request-id": name}
                    )
                    answered[name] = (
                        response.status,
                        trio.current_time() - start,
                        len(response.attempts),
                    )
                    assert response.http_version == ("HTTP/2" if name == "h2" else "HTTP/1.1")
            # The same endpoint, first_byte given explicitly: cut there, as the caller asked.
            explicit = StageTimeouts(first_byte=0.8)
            async with trio_retry.Client(
                stage_timeouts=explicit, retry=trio_retry.RetryPolicy(max_attempts=1), **options
            ) as client:
                with trio.fail_after(10), pytest.raises(trio_retry.DeadlineExceeded) as info:
                    await client.get(
                        base + f"/{name}-cut", deadline=4, headers={"x-request-id": f"{name}-cut"}
                    )
            assert "no response head within first_byte=0.8 s" in str(info.value)
        log = server.log(expect=4)
        nursery.cancel_scope.cancel()
    for name in ("h1", "h2"):
        status, elapsed, attempts = answered[name]
        assert (status, attempts) == (200, 1)
        assert SLOW <= elapsed < SLOW + 1.0
    assert log.by_request_id() == {"h1": 1, "h2": 1, "h1-cut": 1, "h2-cut": 1}
    by_id = {entry.request_id: entry for entry in log.entries}
    assert (by_id["h1"].status, by_id["h2"].status) == (200, 200)
    assert (by_id["h1-cut"].status, by_id["h2-cut"].status) == (499, 499)
    # Executed once each behind nginx: the answered ones and the cut ones.
    assert [r.path for r in backend.requests] == ["/h1", "/h1-cut", "/h2", "/h2-cut"]
