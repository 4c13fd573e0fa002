"""The ledger backend, the one the lab and the proxy tests share: what it records, before it
answers, and how a key deduplicates (no lab needed: it runs in a thread here)."""

from __future__ import annotations

import http.client
import io
import json

import trio

import trio_retry
from benchmarks.exactly_once.backend import DEDUPLICATED, EXECUTED, FENCED, IN_FLIGHT, Ledger
from benchmarks.exactly_once.records import LedgerEntry
from tests.support.backend import Backend
from trio_retry import Backoff, RetryPolicy


def entry(rid: str, key: str | None = None, method: str = "POST") -> LedgerEntry:
    return LedgerEntry(rid=rid, attempt="1", method=method, key=key, result="")


def test_a_key_executes_once_and_every_entry_is_written_before_the_answer() -> None:
    """A key's first request executes; one with the same key while that one is being answered
    is "in flight" (answered 409, no side effect); once it was answered, "deduplicated"."""
    file = io.StringIO()
    ledger = Ledger(file)
    first, _ = ledger.record(entry("a", key="k"))
    results = [first.result, ledger.record(entry("b", key="k"))[0].result]
    ledger.answered(first)
    results += [
        ledger.record(entry("b", key="k"))[0].result,
        ledger.record(entry("c"))[0].result,
        ledger.record(entry("d"))[0].result,
    ]
    assert results == [EXECUTED, IN_FLIGHT, DEDUPLICATED, EXECUTED, EXECUTED]
    lines = [json.loads(line) for line in file.getvalue().splitlines()]
    assert [LedgerEntry(**line) for line in lines] == ledger.entries
    assert [(e.rid, e.result) for e in ledger.entries] == [
        ("a", EXECUTED), ("b", IN_FLIGHT), ("b", DEDUPLICATED), ("c", EXECUTED), ("d", EXECUTED),
    ]  # fmt: skip


def test_over_a_socket_it_echoes_counts_and_reads_chunked_bodies() -> None:
    backend = Backend().start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", backend.port, timeout=5)
        conn.request("POST", "/echo", body=b"hello", headers={"x-request-id": "p"})
        posted = conn.getresponse()
        assert (posted.status, posted.read(), posted.getheader("x-body-length")) == (
            200, b"hello", "5",
        )  # fmt: skip
        conn.request("PUT", "/echo", body=iter([b"ab", b"cde"]), encode_chunked=True)
        put = conn.getresponse()
        assert (put.read(), put.getheader("x-ledger")) == (b"abcde", EXECUTED)
        conn.request("GET", "/count", headers={"x-request-id": "g"})
        assert conn.getresponse().read() == b"executed 3"
        conn.close()
    finally:
        backend.stop()
    assert [(e.method, e.path, e.body_length) for e in backend.executions] == [
        ("POST", "/echo", 5), ("PUT", "/echo", 5), ("GET", "/count", 0),
    ]  # fmt: skip
    assert (backend.count(request_id="p"), backend.count(request_id="g")) == (1, 1)


def test_a_look_up_answers_by_request_id_and_fences_what_it_called_not_executed() -> None:
    backend = Backend().start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", backend.port, timeout=5)

        def send(method: str, path: str, attempt: str = "1") -> tuple[int, bytes]:
            headers = {"x-request-id": "p", "x-attempt": attempt}
            conn.request(method, path, body=b"pay" if method == "POST" else None, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.read()

        assert send("GET", "/requests/p?attempt=1") == (404, b"not executed")
        assert send("POST", "/r", attempt="1") == (409, b"pay")  # late: fenced, not executed
        assert send("POST", "/r", attempt="2") == (200, b"pay")
        status, record = send("GET", "/requests/p?attempt=2")
        conn.close()
    finally:
        backend.stop()
    assert (status, json.loads(record)["attempt"]) == (200, "2")
    assert [(e.attempt, e.result) for e in backend.executions] == [
        ("1", FENCED), ("2", EXECUTED),
    ]  # fmt: skip


async def test_a_key_in_flight_is_409_and_trio_retry_sends_it_again_with_the_key() -> None:
    """Over a socket, the draft's "still being processed": two calls with one key, the second
    sent while the backend is still answering the first (its delay), is answered 409 with
    ``Retry-After: 0``; trio_retry sends it again with the same key until the first was
    answered, and then gets the deduplicated answer. One execution."""
    backend = Backend(max_delay=0.6).start()
    url = f"http://127.0.0.1:{backend.port}/r"
    try:
        async with trio_retry.Client(
            retry=RetryPolicy(max_attempts=20, backoff=Backoff(initial=0.05, max=0.05))
        ) as client:
            answers: list[trio_retry.Response] = []

            async def pay(rid: str) -> None:
                headers = {"x-request-id": rid}
                answers.append(
                    await client.post(
                        url, content=b"pay", headers=headers, idempotency_key="k-1", deadline=5.0
                    )
                )

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pay, "first")
                    while not backend.executions:  # the first is on the ledger: in flight
                        await trio.sleep(0.01)
                    nursery.start_soon(pay, "second")
    finally:
        backend.stop()
    results = [(e.rid, e.result) for e in backend.executions]
    assert results[0] == ("first", EXECUTED)
    assert results[-1] == ("second", DEDUPLICATED)
    assert ("second", IN_FLIGHT) in results
    second = next(a for a in answers if a.headers.get("x-ledger") == DEDUPLICATED)
    assert second.attempts[0].status == 409
    assert second.attempts[-1].status == 200
    assert sum(1 for _, result in results if result == EXECUTED) == 1
