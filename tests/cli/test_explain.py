"""``--explain``: the attempt trail, a row per attempt, a last line in words; and its JSON."""

from __future__ import annotations

import json

import pytest
import trio

from trio_retry import Attempt, Evidence, FailureCategory, RetryAllowed, Stage
from trio_retry._cli.progress import human_bytes, render
from trio_retry._trail import attempt_table, execution_line
from trio_retry.testing import CloseAfterBody, FaultServer, Respond, refused_port

from .support import cli

HEADER = ["#", "stage", "evidence", "status", "category", "proto", "sent", "recv", "connect", "tls",
          "first", "total_ms", "decision"]  # fmt: skip


async def test_table_rows_and_words(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("POST", "/orders", CloseAfterBody(), Respond(201, body=b"created"))
    ran = await cli("post", url + "/orders", "-d", "x", "--idempotency-key", "--explain")
    assert (ran.code, ran.out) == (0, b"created")
    lines = ran.err_text.splitlines()
    assert lines[0].split() == HEADER
    first, second = (line.split() for line in lines[1:3])
    assert first[:5] == ["1", "AWAITING_RESPONSE", "SENT_NO_RESPONSE", "-", "CONNECTION_BROKEN"]
    assert first[5] == "1.1"  # the protocol
    assert int(first[6]) > 0  # bytes sent
    assert first[-3:] == ["retry", "in", first[-1]]
    assert second[:5] == ["2", "RESPONSE_BODY", "RESPONSE_RECEIVED", "201", "-"]  # streamed
    assert lines[3] == "HTTP/1.1 201"
    assert lines[4].startswith("body: 7 bytes in ")
    assert lines[5] == (
        "execution: the server received it and answered 201; attempt 1 may have executed too, "
        "and carried the same Idempotency-Key: a server that deduplicates on it executed it once"
    )
    assert len(lines) == 6

    never = await cli("get", f"http://127.0.0.1:{refused_port()}/", "--attempts", "2", "--explain")
    assert never.code == 1
    assert never.err_text.splitlines()[-1] == (
        "execution: the server never received it: nothing was executed, it is safe to send again"
    )


async def test_explain_json_for_scripts(nursery: trio.Nursery) -> None:
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/r", Respond(302, headers={"Location": "/s"}))
    server.route("GET", "/s", Respond(503, headers={"Retry-After": "0"}), Respond(200, body=b"s"))
    server.route("POST", "/pay", CloseAfterBody())

    ran = await cli("get", url + "/r", "-L", "--explain=json")
    assert (ran.code, ran.out) == (0, b"s")
    trail = json.loads(ran.err)  # stderr holds the JSON document alone
    assert trail["outcome"] == "response"
    assert trail["status"] == 200
    assert [(h["url"], h["status"]) for h in trail["hops"]] == [
        (url + "/r", 302),
        (url + "/s", 200),
    ]
    retried = trail["hops"][1]["attempts"]
    assert [a["status"] for a in retried] == [503, 200]
    assert retried[0]["decision"].startswith("retry in")
    assert retried[0]["retry_delay"] >= 0
    assert set(retried[1]) >= {"stage", "evidence", "category", "bytes_sent", "bytes_received"}
    assert "total" in retried[1]["timings_ms"]
    assert trail["execution"] == "the server received it and answered 200"

    lost = await cli("post", url + "/pay", "-d", "x", "--explain=json")
    assert lost.code == 3
    trail = json.loads(lost.err)
    assert trail["outcome"] == "ambiguous"
    assert trail["error"] == "HttpAmbiguousExecutionError"
    assert trail["execution"].startswith("it may have executed: reconcile")
    assert trail["hops"][0]["attempts"][0]["evidence"] == "SENT_NO_RESPONSE"
    assert trail["hops"][0]["attempts"][0]["ambiguous"] is True


def attempt(number: int, evidence: Evidence, **fields: object) -> Attempt:
    return Attempt(number=number, stage=Stage.AWAITING_RESPONSE, evidence=evidence, **fields)  # type: ignore[arg-type]


def test_table_shows_status_and_category_apart() -> None:
    rows = attempt_table(
        [
            attempt(1, Evidence.NOT_SENT, category=FailureCategory.CONNECT,
                    decision=RetryAllowed(0.05), timings={"total": 0.001}),
            attempt(2, Evidence.RESPONSE_RECEIVED, status=200, timings={"total": 0.002}),
        ],
        wide=False,
    ).splitlines()  # fmt: skip
    assert rows[0].split() == ["#", "stage", "evidence", "status", "category", "ms", "decision"]
    assert rows[1].split() == ["1", "AWAITING_RESPONSE", "NOT_SENT", "-", "CONNECT", "1.0",
                               "retry", "in", "0.050s"]  # fmt: skip
    assert rows[2].split() == ["2", "AWAITING_RESPONSE", "RESPONSE_RECEIVED", "200", "-", "2.0",
                               "-"]  # fmt: skip


@pytest.mark.parametrize(
    ("evidence", "words"),
    [
        (Evidence.SENT_NO_RESPONSE, "the server may have received it but never answered"),
        (Evidence.PARTIAL_RESPONSE, "it executed: the server answered 200, then the response"),
    ],
)
def test_execution_words(evidence: Evidence, words: str) -> None:
    assert execution_line([attempt(1, evidence, status=200)]).startswith(words)


def test_progress_rendering() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 50 * 2**20)] == [
        "0 B", "1023 B", "1.5 KiB", "50.0 MiB"
    ]  # fmt: skip
    line = render("download", 25 * 2**20, 50 * 2**20, 2.0, 80)
    assert line.startswith("download  50% [")
    assert line.endswith("25.0 MiB / 50.0 MiB  12.5 MiB/s  ETA 0:02")
    assert len(line) == 80
    assert render("download", 10, 100, 1.0, 30) == "download  10% 10 B / 100 B  10"  # narrow
    assert render("upload", 2048, None, 1.0, 80, tick=1) == "upload  /  2.0 KiB  2.0 KiB/s"


@pytest.mark.parametrize("flag", ["-v", "--verbose"])
async def test_verbose_is_explain_and_the_response_heads(nursery: trio.Nursery, flag: str) -> None:
    # Before: "unrecognized arguments: -v" (exit 2).
    server = FaultServer(http2=False)
    url = await nursery.start(server.serve)
    server.route("GET", "/r", Respond(302, headers={"Location": "/s"}))
    server.route("GET", "/s", Respond(200, body=b"hello", headers={"X-A": "1"}))
    ran = await cli("get", url + "/r", "-L", flag)
    assert (ran.code, ran.out) == (0, b"hello")  # stdout: the body alone
    lines = ran.err_text.splitlines()
    assert lines[:9] == [
        "< HTTP/1.1 302",
        "< Location: /s",
        "< Content-Length: 0",
        "<",
        "< HTTP/1.1 200",
        "< X-A: 1",
        "< Content-Length: 5",
        "<",
        f"hop 1: GET {url}/r -> 302",
    ]
    assert lines[9].split() == HEADER  # then the --explain trail
    assert lines[-1] == "execution: the server received it and answered 200"

    # With --explain=json, stderr holds the JSON document alone.
    server.route("GET", "/t", Respond(200, body=b"t"))
    ran = await cli("get", url + "/t", flag, "--explain=json")
    assert (ran.code, ran.out) == (0, b"t")
    assert json.loads(ran.err)["status"] == 200
