"""The ledger backend, the one the lab and the proxy tests share: what it records, before it
answers, and how a key deduplicates (no lab needed: it runs in a thread here)."""

from __future__ import annotations

import http.client
import io
import json

from benchmarks.exactly_once.backend import DEDUPLICATED, EXECUTED, FENCED, Ledger
from benchmarks.exactly_once.records import LedgerEntry
from tests.support.backend import Backend


def entry(rid: str, key: str | None = None, method: str = "POST") -> LedgerEntry:
    return LedgerEntry(rid=rid, attempt="1", method=method, key=key, result="")


def test_a_key_executes_once_and_every_entry_is_written_before_the_answer() -> None:
    file = io.StringIO()
    ledger = Ledger(file)
    results = [
        ledger.record(entry("a", key="k"))[0].result,
        ledger.record(entry("b", key="k"))[0].result,
        ledger.record(entry("c"))[0].result,
        ledger.record(entry("d"))[0].result,
    ]
    assert results == [EXECUTED, DEDUPLICATED, EXECUTED, EXECUTED]
    lines = [json.loads(line) for line in file.getvalue().splitlines()]
    assert [LedgerEntry(**line) for line in lines] == ledger.entries
    assert [(e.rid, e.result) for e in ledger.entries] == [
        ("a", EXECUTED), ("b", DEDUPLICATED), ("c", EXECUTED), ("d", EXECUTED),
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
