"""A response that is not valid HTTP (issue #38 row 8, SPEC §20): on a fresh connection it is
not retried, since the same server will answer the same way (one attempt, ``ProtocolFailed``,
the server saw one request); on a reused connection the connection may be at fault, so it goes
once more, on a fresh one. The rule is the engine's (``_core/engine.py``, rule 9, table-driven
in ``tests/core/test_engine.py``); here end to end, counting what the servers saw: a
FaultServer over HTTP/1.1 and h2c, and a bare socket server of the test's own."""

from __future__ import annotations

from functools import partial

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry import Evidence, FailureCategory, ProtocolFailed
from trio_retry.testing import Action, FaultServer, Raw, Respond

MiB = 1024 * 1024
#: An HTTP/2 DATA frame on stream 0: a connection error (RFC 9113 §6.1).
H2_DATA_ON_STREAM_0 = b"\x00\x00\x04\x00\x01\x00\x00\x00\x00data"
#: (name, what the server answers, a phrase of the error)
NOT_HTTP11: list[tuple[str, Action, str]] = [
    ("garbage", Raw(b"SSH-2.0-OpenSSH_9.6\r\n"), "SSH-2.0"),
    ("a 1 MiB head", Respond(200, headers={"X-Big": "a" * MiB}), "max_header_bytes"),
    ("Content-Length: abc", Raw(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello"), ""),
]
#: Over HTTP/2 the head over the limit is smaller: the FaultServer's HPACK encoder (pure
#: Python, Huffman) takes seconds over a MiB; the client's limit is lowered to match.
NOT_HTTP2: list[tuple[str, Action, str]] = [
    ("a frame on stream 0", Raw(H2_DATA_ON_STREAM_0, close=False), ""),
    ("a head over the limit", Respond(200, headers={"X-Big": "a" * 8192}), "max_header_bytes"),
]
CASES = [("h1", *case) for case in NOT_HTTP11] + [("h2c", *case) for case in NOT_HTTP2]
IDS = [f"{mode}-{name}" for mode, name, _, _ in CASES]


async def start(nursery: trio.Nursery, mode: str) -> FaultServer:
    server = FaultServer(http2=mode == "h2c")
    await nursery.start(server.serve)
    return server


def client_for(mode: str) -> trio_retry.Client:
    h2c = mode == "h2c"
    return trio_retry.Client(
        retry=FAST, http2_prior_knowledge=h2c, max_header_bytes=4096 if h2c else 65536
    )


@pytest.mark.parametrize(("mode", "name", "answer", "says"), CASES, ids=IDS)
async def test_on_a_fresh_connection_it_is_not_retried(
    nursery: trio.Nursery, mode: str, name: str, answer: Action, says: str
) -> None:
    server = await start(nursery, mode)
    server.default = answer
    async with client_for(mode) as client:
        with trio.fail_after(10), pytest.raises(ProtocolFailed) as info:
            await client.get(server.url + "/report")
    (attempt,) = info.value.attempts
    assert (attempt.category, attempt.evidence, attempt.connection_reused) == (
        FailureCategory.REMOTE_PROTOCOL,
        Evidence.SENT_NO_RESPONSE,
        False,
    )
    assert says in str(info.value)
    assert server.executed_count("GET", "/report") == 1
    assert server.connections_accepted == 1


@pytest.mark.parametrize(("mode", "name", "answer", "says"), CASES, ids=IDS)
async def test_on_a_reused_connection_it_goes_once_more_on_a_fresh_one(
    nursery: trio.Nursery, mode: str, name: str, answer: Action, says: str
) -> None:
    server = await start(nursery, mode)
    server.route("GET", "/report", answer, Respond(200, body=b"fine"))
    server.route("GET", "/again", answer, answer)
    async with client_for(mode) as client:
        with trio.fail_after(10):
            warm = await client.get(server.url + "/warm")
            response = await client.get(server.url + "/report")
            await client.get(server.url + "/warm")  # a connection to reuse again
            with pytest.raises(ProtocolFailed) as info:
                await client.get(server.url + "/again")
    assert warm.status == 200
    broken, answered = response.attempts
    assert (broken.category, broken.connection_reused) == (FailureCategory.REMOTE_PROTOCOL, True)
    assert (answered.status, answered.connection_reused) == (200, False)
    # Once more, not twice: the fresh connection answered the same way, and that ends it.
    reused, fresh = info.value.attempts
    assert (reused.connection_reused, fresh.connection_reused) == (True, False)
    assert {reused.category, fresh.category} == {FailureCategory.REMOTE_PROTOCOL}
    assert server.executed_count("GET", "/report") == 2
    assert server.executed_count("GET", "/again") == 2


class GarbageServer:
    """A bare HTTP/1.1 server on a socket (no FaultServer, no h11): it reads request heads and
    answers the n-th request it sees with ``answers[n]`` (a valid keep-alive response, or
    bytes that are not HTTP), counting the requests and the connections."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffered = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                self.requests.append(head.split(b"\r\n", 1)[0])
                await stream.send_all(self.answers[len(self.requests) - 1])


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
GARBAGE = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not HTTP at all\r\n\r\n"


@pytest.mark.parametrize(
    ("answers", "calls", "requests", "connections"),
    [
        ([GARBAGE], ["/a"], 1, 1),  # fresh: one request, refused
        ([OK, GARBAGE, GARBAGE], ["/warm", "/a"], 3, 2),  # reused, then once on a fresh one
        ([OK, GARBAGE, OK], ["/warm", "/a"], 3, 2),  # ... which answers
    ],
    ids=["fresh", "reused-then-fresh-garbage", "reused-then-fresh-answers"],
)
async def test_on_bare_sockets_the_server_counts_what_it_saw(
    nursery: trio.Nursery, answers: list[bytes], calls: list[str], requests: int, connections: int
) -> None:
    server = GarbageServer(answers)
    (listener,) = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
    base = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
    outcomes: list[object] = []
    async with trio_retry.Client(retry=FAST) as client:
        with trio.fail_after(10):
            for path in calls:
                try:
                    outcomes.append((await client.get(base + path)).status)
                except ProtocolFailed as exc:
                    outcomes.append(len(exc.attempts))
    assert len(server.requests) == requests
    assert server.connections == connections
    last = answers[-1]
    expected_last = 200 if last == OK else (1 if len(answers) == 1 else 2)
    assert outcomes[-1] == expected_last
