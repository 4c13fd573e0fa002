"""Handler routes, path patterns, replace/clear, unused scripts and strict mode (issue #17)."""

from __future__ import annotations

import sys

import pytest
import trio

import trio_retry
from tests.conftest import FAST
from trio_retry.testing import (
    CloseAfterBody,
    FaultServer,
    GoAway,
    Handler,
    RecordedRequest,
    RefuseStream,
    Respond,
    ScriptError,
    UnusedScriptError,
)
from trio_retry.testing._routes import Script


def _echo(request: RecordedRequest) -> Respond:
    return Respond(200, body=f"{request.method} {dict(request.params)}".encode())


# -- the pure queues ---------------------------------------------------------------------------


def test_pattern_routes_and_their_parameters() -> None:
    script = Script()
    script.extend_route("GET", "/users/{id}", [Respond(201), Respond(202)])
    script.extend_route("GET", "/files/{rest:path}", [Respond(203)])
    pick = script.pick("GET", "/users/a%20b?x=1")
    assert (pick.action, dict(pick.params)) == (Respond(201), {"id": "a b"})
    assert script.pick("GET", "/users/7/more").action == Respond(200, body=b"ok")  # one segment
    pick = script.pick("GET", "/files/a/b.txt")
    assert (pick.action, dict(pick.params)) == (Respond(203), {"rest": "a/b.txt"})
    assert script.pick("POST", "/users/7").action == Respond(200, body=b"ok")  # method differs


def test_exact_beats_path_beats_pattern_and_star_matches_any_method() -> None:
    script = Script()
    script.extend_route("*", "/users/{id}", [Respond(203)] * 2)
    script.extend_route("GET", "/users/me", [Respond(202)])
    script.extend_route("GET", "/users/me?v=1", [Respond(201)])
    assert script.pop("GET", "/users/me?v=1") == Respond(201)
    assert script.pop("GET", "/users/me?v=1") == Respond(202)
    assert script.pop("GET", "/users/me?v=1") == Respond(203)
    assert script.pop("DELETE", "/users/me") == Respond(203)
    assert script.queued() == ()


@pytest.mark.parametrize("pattern", ["/a/{", "/a/{1x}", "/a/{x}/{x}", "/a/{x:int}", "/a/{x}?q=1"])
def test_malformed_patterns_fail_where_written(pattern: str) -> None:
    with pytest.raises(ValueError, match="pattern"):
        Script().extend_route("GET", pattern, [Respond()])


def test_route_paths_and_methods_are_checked() -> None:
    with pytest.raises(ValueError, match="starting with '/'"):
        Script().extend_route("GET", "users", [Respond()])
    with pytest.raises(TypeError, match="method"):
        Script().extend_route("", "/", [Respond()])


def test_a_handler_stays_and_a_limited_handler_runs_out() -> None:
    script = Script()
    handler = Handler(_echo)
    script.extend_route("GET", "/h", [CloseAfterBody(), handler])
    assert script.pop("GET", "/h") == CloseAfterBody()
    assert [script.pop("GET", "/h") for _ in range(3)] == [handler] * 3
    assert script.queued() == (handler,)
    assert script.unused() == []  # called: used, although still queued
    limited = Handler(_echo, times=2)
    script.extend_route("GET", "/l", [limited, Respond(204)])
    assert script.pop("GET", "/l") == limited
    assert script.unused() == [
        ("GET /l", "handler _echo (1 of 2 calls left)"),
        (
            "GET /l",
            repr(Respond(204)),
        ),
    ]
    assert [script.pop("GET", "/l") for _ in range(3)] == [limited, Respond(204), script.default]


def test_nothing_can_be_queued_behind_an_unlimited_handler() -> None:
    script = Script()
    script.extend([Handler(_echo)])
    with pytest.raises(ValueError, match=r"handler _echo, which answers every later request"):
        script.extend([Respond(500)])
    with pytest.raises(ValueError, match="could never be used"):
        script.extend_route("GET", "/x", [Handler(_echo), Respond(500)])


def test_invalid_handlers() -> None:
    with pytest.raises(TypeError):
        Handler(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="times"):
        Handler(_echo, times=0)
    server = FaultServer()
    with pytest.raises(TypeError, match="not the class Respond"):
        server.route("GET", "/", Respond)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a fault-server action"):
        server.route("GET", "/", 200)  # type: ignore[arg-type]


def test_replace_and_clear() -> None:
    server = FaultServer()
    server.route("GET", "/a", Respond(201), Respond(202))
    server.route("GET", "/b", Respond(203))
    server.script(Respond(204))
    server.replace("get", "/a", _echo)
    assert [type(a).__name__ for a in server.queued] == ["Respond", "Handler", "Respond"]
    server.clear("GET", "/a")
    assert server.queued == (Respond(204), Respond(203))
    with pytest.raises(TypeError, match="both method and path"):
        server.clear("GET")
    server.default = Respond(418)
    server.clear()
    assert server.queued == ()
    assert server.default == Respond(418)
    server.assert_all_used()  # cleared actions are not "unused"


def test_assert_all_used_lists_what_was_left() -> None:
    server = FaultServer()
    server.script(CloseAfterBody())
    server.route("GET", "/users/{id}", Respond(404), _echo)
    with pytest.raises(UnusedScriptError) as info:
        server.assert_all_used()
    message = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert "3 scripted action(s) were never used" in message
    assert "global queue: CloseAfterBody(reset=False)" in message
    assert "GET /users/{id}: Respond(status=404" in message
    assert "GET /users/{id}: handler _echo (never called)" in message


def test_records_expose_query_text_and_json() -> None:
    server = FaultServer()
    record = RecordedRequest(
        method="POST",
        path="/s?q=a+b&q=c&empty=",
        headers=(),
        body=b'{"n": 1}',
        connection_id=1,
        http_version="HTTP/1.1",
        stream_id=None,
        time=0.0,
        executed=True,
        action=server.default,
    )
    assert record.query == {"q": "a b", "empty": ""}
    assert record.query_items == (("q", "a b"), ("q", "c"), ("empty", ""))
    assert record.json() == {"n": 1}
    assert record.text == '{"n": 1}'
    assert dict(record.params) == {}
    assert hash(record) == hash(record)  # params take no part in the hash


def test_tls_without_trustme_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trustme", None)  # "import trustme" now fails
    with pytest.raises(ImportError, match=r"pip install 'trio_retry\[testing\]'") as info:
        FaultServer(tls=True)
    assert isinstance(info.value.__cause__, ImportError)
    FaultServer()  # cleartext never needs it


# -- on the wire, through the real client --------------------------------------------------------


@pytest.fixture(params=["h1", "h2c"])
def h2c(request: pytest.FixtureRequest) -> bool:
    return request.param == "h2c"


async def test_a_handler_computes_the_response_from_the_request(
    nursery: trio.Nursery, h2c: bool
) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    seen: list[RecordedRequest] = []

    async def create_user(request: RecordedRequest) -> Respond:
        seen.append(request)
        await trio.sleep(0)  # async handlers are awaited
        body = request.json()
        return Respond(
            201,
            headers={"content-type": "application/json", "x-org": request.params["org"]},
            body=f'{{"name": "{body["name"]}", "page": "{request.query["page"]}"}}'.encode(),
        )

    server.route("POST", "/orgs/{org}/users", create_user)
    async with trio_retry.Client(http2_prior_knowledge=h2c) as client:
        for name in ("ada", "bob"):
            response = await client.post(
                server.url + "/orgs/acme/users?page=2", json={"name": name}
            )
            assert response.status == 201
            assert response.json() == {"name": name, "page": "2"}
            assert response.headers["x-org"] == "acme"
    assert [r.json()["name"] for r in seen] == ["ada", "bob"]
    assert all(r.executed is False and r.body for r in seen)  # seen before it was applied
    assert [r.executed for r in server.requests] == [True, True]
    assert [r.action for r in server.requests] == [
        Respond(
            201,
            headers=(("content-type", "application/json"), ("x-org", "acme")),
            body=b'{"name": "ada", "page": "2"}',
        ),
        Respond(
            201,
            headers=(("content-type", "application/json"), ("x-org", "acme")),
            body=b'{"name": "bob", "page": "2"}',
        ),
    ]
    assert dict(server.requests[0].params) == {"org": "acme"}
    server.assert_all_used()


async def test_a_handler_can_return_any_fault(nursery: trio.Nursery, h2c: bool) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    calls = 0

    def flaky(request: RecordedRequest) -> CloseAfterBody | Respond:
        nonlocal calls
        calls += 1
        return CloseAfterBody() if calls == 1 else Respond(200, body=b"second")

    server.route("POST", "/pay", flaky)
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=h2c) as client:
        with pytest.raises(trio_retry.HttpAmbiguousExecutionError) as info:
            await client.post(server.url + "/pay", content=b"x")
        assert info.value.evidence is trio_retry.Evidence.SENT_NO_RESPONSE
        response = await client.get(server.url + "/pay")  # GET: a different route, default
        assert response.content == b"ok"
        response = await client.post(server.url + "/pay", content=b"x")
        assert response.content == b"second"
    assert server.executed_count("POST", "/pay") == 2


async def test_a_refusal_from_a_handler_is_not_executed(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    server.route("POST", "/pay", Handler(lambda request: RefuseStream(), times=1))
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=True) as client:
        response = await client.post(server.url + "/pay", content=b"x")
    assert response.status == 200
    assert [(a.evidence, a.category) for a in response.attempts] == [
        (trio_retry.Evidence.NOT_SENT, trio_retry.FailureCategory.REFUSED_STREAM),
        (trio_retry.Evidence.RESPONSE_RECEIVED, None),
    ]
    assert [(r.executed, r.action) for r in server.requests] == [
        (False, RefuseStream()),
        (True, server.default),
    ]


async def test_a_goaway_from_a_handler(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    server.route("GET", "/g", Handler(lambda request: GoAway(last_stream_id=0), times=1))
    async with trio_retry.Client(retry=FAST, http2_prior_knowledge=True) as client:
        response = await client.get(server.url + "/g")
    assert [a.evidence for a in response.attempts][-1] is trio_retry.Evidence.RESPONSE_RECEIVED
    assert server.requests[0].action == GoAway(last_stream_id=0)
    assert server.requests[0].executed is False  # above the GOAWAY's last stream id


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (lambda request: 1 / 0, "handler <lambda> failed on GET /boom: ZeroDivisionError"),
        (lambda request: "hello", "returned 'hello' for GET /boom"),
    ],
)
async def test_a_broken_handler_fails_serve_loudly(
    handler: object, message: str, h2c: bool
) -> None:
    server = FaultServer()
    server.route("GET", "/boom", handler)  # type: ignore[arg-type]
    with pytest.RaisesGroup(pytest.RaisesExc(ScriptError, match=message), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            async with trio_retry.Client(retry=FAST, http2_prior_knowledge=h2c) as client:
                with trio.fail_after(5):
                    await client.get(server.url + "/boom")
                await trio.sleep_forever()  # serve fails: the nursery cancels this


async def test_strict_mode_fails_when_the_script_was_not_used() -> None:
    server = FaultServer(strict=True)
    server.route("GET", "/never", Respond(500))
    with pytest.RaisesGroup(
        pytest.RaisesExc(UnusedScriptError, match=r"GET /never: Respond\(status=500")
    ):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            nursery.cancel_scope.cancel()


async def test_strict_mode_is_quiet_when_everything_was_used(nursery: trio.Nursery) -> None:
    server = FaultServer(strict=True)
    server.route("GET", "/once", Respond(201))
    async with trio.open_nursery() as inner:
        await inner.start(server.serve)
        async with trio_retry.Client() as client:
            assert (await client.get(server.url + "/once")).status == 201
        inner.cancel_scope.cancel()
