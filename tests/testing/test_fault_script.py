"""The pure half of the fault server: actions, queues, records, header and pacing helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from trio_retry.testing import (
    Action,
    CloseAfterBody,
    CloseAfterHead,
    CloseBeforeRead,
    EndlessBody,
    GoAway,
    PartialBody,
    RecordedRequest,
    RefuseStream,
    Respond,
    Stall,
)
from trio_retry.testing._routes import Script
from trio_retry.testing._script import (
    body_allowed,
    h2_response_headers,
    paced_chunks,
    reads_body,
    response_headers,
)


def test_respond_defaults_and_header_forms() -> None:
    r = Respond()
    assert (r.status, r.headers, r.body, r.delay, r.informational) == (200, (), b"", 0.0, ())
    assert r.body_rate is None
    assert r.close_after is False
    assert Respond(headers={"A": "1", "B": "2"}).headers == (("A", "1"), ("B", "2"))
    assert Respond(headers=[("A", "1"), ("A", "2")]).headers == (("A", "1"), ("A", "2"))
    assert Respond(503, headers={"Retry-After": "1"}).headers == (("Retry-After", "1"),)
    assert Respond(informational=[100, 103]).informational == (100, 103)


def test_actions_are_frozen_and_hashable() -> None:
    for action in (
        Respond(body=b"x"),
        CloseBeforeRead(),
        CloseAfterHead(reset=True),
        CloseAfterBody(),
        Stall(1.0),
        PartialBody(),
        RefuseStream(),
        GoAway(3),
    ):
        for f in dataclasses.fields(action):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(action, f.name, None)
        assert hash(action) == hash(action)
    assert Stall(0.5) == Stall(0.5, then=Respond(200))
    assert GoAway().then == Respond()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Respond(99),
        lambda: Respond(600),
        lambda: Respond(informational=(200,)),
        lambda: Respond(informational=(101,)),
        lambda: Respond(delay=-1),
        lambda: Respond(delay=float("inf")),
        lambda: Respond(body_rate=0),
        lambda: Respond(headers={"bad name": "x"}),
        lambda: Respond(headers={"X": "a\r\nb"}),
        lambda: PartialBody(declared_length=10, body=b"x" * 10),
        lambda: Stall(-0.1),
        lambda: GoAway(last_stream_id=-1),
        lambda: GoAway(error_code=-1),
    ],
)
def test_invalid_actions_fail_where_written(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda headers: Respond(headers=headers),
        lambda headers: PartialBody(headers=headers),
        lambda headers: EndlessBody(headers=headers),
    ],
)
def test_headers_that_cannot_be_sent_fail_where_written(
    make: Callable[[dict[str, str]], object],
) -> None:
    # Every protocol sends a value's characters one byte each: "€" has no byte. (It crashed
    # FaultServer.serve when the response was sent.)
    with pytest.raises(ValueError, match=r"header 'X-Price': its value must be Latin-1") as info:
        make({"X-Price": "5 €"})
    assert "character 2 is '€' (U+20AC)" in str(info.value)
    assert make({"X-Price": "5 \xa3, café"}) is not None  # Latin-1: sent as it is
    for name in ("X(A)", "Ä", "X\x01", "X/Y", ""):  # not tokens: h11 answered 500 instead
        with pytest.raises(ValueError, match=r"invalid header name .*: expected a token"):
            make({name: "v"})
    # Leading or trailing whitespace: HTTP/1.1 sent a response without the script's headers
    # (h11 refused the value), HTTP/2 sent it as given (a malformed response, RFC 9113 §8.2.1).
    for value in (" padded", "padded ", "a\t", "\t"):
        with pytest.raises(ValueError, match=r"header 'X-A': its value .* starts or ends with"):
            make({"X-A": value})
    assert make({"X-A": "inner \t space", "X-B": ""}) is not None  # inside, or empty: sent


def test_then_must_act_after_the_body() -> None:
    with pytest.raises(TypeError):
        Stall(1, then=CloseBeforeRead())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        GoAway(then=RefuseStream())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Respond(headers={"X": 1})  # type: ignore[arg-type]


def test_reads_body_defines_executed() -> None:
    executes: list[Action] = [Respond(), Stall(1), PartialBody(), CloseAfterBody(), GoAway()]
    never: list[Action] = [CloseBeforeRead(), CloseAfterHead(), RefuseStream()]
    assert all(reads_body(a) for a in executes)
    assert not any(reads_body(a) for a in never)


def test_script_order_route_then_global_then_default() -> None:
    script = Script()
    script.extend([Respond(201), Respond(202)])
    script.extend_route("post", "/pay", [Respond(301)])
    assert script.pending() == 3
    assert script.pop("POST", "/pay?x=1") == Respond(301)  # query ignored for routes
    assert script.pop("POST", "/pay") == Respond(201)  # route empty: global queue
    assert script.pop("GET", "/pay") == Respond(202)
    assert script.pop("GET", "/") == Respond(200, body=b"ok")  # default
    script.default = Respond(418)
    assert script.pop("GET", "/") == Respond(418)
    assert script.pending() == 0


def test_script_exact_target_route_wins() -> None:
    script = Script()
    script.extend_route("GET", "/a?x=1", [Respond(201)])
    script.extend_route("GET", "/a", [Respond(202)])
    assert script.pop("GET", "/a?x=1") == Respond(201)
    assert script.pop("GET", "/a?x=1") == Respond(202)
    assert script.queued() == ()


def test_script_rejects_non_actions() -> None:
    with pytest.raises(TypeError):
        Script().extend([200])  # type: ignore[list-item]


def _record(**kwargs: object) -> RecordedRequest:
    base: dict[str, object] = {
        "method": "POST",
        "path": "/pay?id=1",
        "headers": (("host", "x"), ("idempotency-key", "k")),
        "body": b"",
        "connection_id": 1,
        "http_version": "HTTP/1.1",
        "stream_id": None,
        "time": 0.0,
        "executed": True,
        "action": Respond(),
    }
    base.update(kwargs)
    return RecordedRequest(**base)  # type: ignore[arg-type]


def test_recorded_request_lookup_and_matching() -> None:
    r = _record()
    assert r.header("Idempotency-Key") == "k"
    assert r.header("missing") is None
    assert r.matches()
    assert r.matches("post", "/pay")
    assert r.matches(path="/pay?id=1")
    assert not r.matches("GET")
    assert not r.matches(path="/pa")


def test_response_headers_content_length() -> None:
    assert response_headers(200, (), 5) == (("Content-Length", "5"),)
    given = (("content-length", "9"),)
    assert response_headers(200, given, 5) == given
    chunked = (("Transfer-Encoding", "chunked"),)
    assert response_headers(200, chunked, 5) == chunked
    assert response_headers(204, (), 0) == ()


def test_h2_response_headers() -> None:
    headers = (("X-A", "1"), ("Connection", "close"), ("Transfer-Encoding", "chunked"))
    assert h2_response_headers(503, headers, 3) == (
        (":status", "503"),
        ("x-a", "1"),
        ("content-length", "3"),
    )
    assert h2_response_headers(204, (), 0) == ((":status", "204"),)


def test_body_allowed() -> None:
    assert body_allowed(200, "GET")
    assert not body_allowed(200, "HEAD")
    assert not body_allowed(204, "GET")
    assert not body_allowed(304, "GET")


def test_paced_chunks() -> None:
    assert paced_chunks(b"", 10) == []
    assert paced_chunks(b"abc", None) == [(b"abc", 0.0)]
    chunks = paced_chunks(b"x" * 100, 400.0)  # 20 bytes per 50 ms tick
    assert [len(c) for c, _ in chunks] == [20] * 5
    assert [p for _, p in chunks] == [0.05] * 4 + [0.0]
    assert b"".join(c for c, _ in chunks) == b"x" * 100
    assert [len(c) for c, _ in paced_chunks(b"ab", 1.0)] == [1, 1]
