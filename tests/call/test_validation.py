"""Every per-call option is checked before any I/O, and every Client option at construction.

A call-time mistake raises ``InvalidRequest`` (``NOT_SENT``, ``INVALID_REQUEST``, no attempts)
whose message names the option and shows what was given; the server never sees a connection.
A constructor mistake raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

import trio_retry
from trio_retry import Evidence, FailureCategory, Idempotency, InvalidRequest, RetryPolicy
from trio_retry.testing import FaultServer, Respond

# (options, words the message must contain)
BAD_CALL_OPTIONS: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"deadline": "2"}, ("deadline", "'2' (str)", "positive number")),
    ({"deadline": 0}, ("deadline", "0")),
    ({"deadline": -1.5}, ("deadline", "-1.5")),
    ({"deadline": math.nan}, ("deadline", "nan")),
    ({"deadline": True}, ("deadline", "True (bool)")),
    ({"idempotency": "IDEMPOTENT"}, ("idempotency", "'IDEMPOTENT' (str)", "Idempotency.")),
    ({"idempotency_key": ""}, ("idempotency_key", "empty string")),
    ({"idempotency_key": "   "}, ("idempotency_key", "a space at position 0", "not shown")),
    ({"idempotency_key": "a b"}, ("idempotency_key", "a space at position 1")),
    ({"idempotency_key": b"key-1"}, ("idempotency_key", "bytes (5 bytes, not shown)")),
    ({"idempotency_key": 5}, ("idempotency_key", "5 (int)")),
    ({"idempotency_key": "k" * 256}, ("idempotency_key", "256 characters", "at most 255")),
    ({"idempotency_key": "caf\u00e9"}, ("idempotency_key", "visible ASCII")),
    ({"retry": 3}, ("retry", "3 (int)", "RetryPolicy")),
    ({"follow_redirects": "yes"}, ("follow_redirects", "'yes' (str)")),
    ({"headers": {"X-Trace": None}}, ("X-Trace", "None", "str or bytes")),
    ({"headers": {None: "v"}}, ("header names", "None")),
    ({"headers": "X-A: 1"}, ("headers", "str")),
    ({"headers": {"Idempotency-Key": ""}}, ("Idempotency-Key", "empty string")),
    ({"params": {"a": object()}}, ("params['a']", "object")),
    ({"params": {"a": [1, None]}}, ("params['a']", "None")),
    ({"params": "a=1"}, ("params", "str (3 characters, not shown)")),
    ({"params": {"a": math.inf}}, ("params['a']", "inf")),
    ({"data": b"raw"}, ("data", "bytes (3 bytes", "content=")),
    ({"data": {"a": None}}, ("data['a']", "None")),
    ({"data": {"a": object()}}, ("data['a']", "object")),
    ({"files": [("f", b"x")]}, ("files", "mapping")),
    # Strict JSON: NaN and the infinities are not JSON, so nothing is sent rather than `NaN`.
    ({"json": {"x": math.nan}}, ("json=", "not JSON compliant")),
    ({"json": [math.inf]}, ("json=", "not JSON compliant")),
    ({"json": -math.inf}, ("json=", "not JSON compliant")),
    ({"json": {"x": object()}}, ("json=", "object")),
]


@pytest.mark.parametrize(("options", "says"), BAD_CALL_OPTIONS)
async def test_a_bad_call_option_is_refused_before_any_io(
    server: FaultServer, options: dict[str, Any], says: tuple[str, ...]
) -> None:
    async with trio_retry.Client() as client:
        with pytest.raises(InvalidRequest) as info:
            await client.post(server.url + "/pay", **options)
    error = info.value
    assert (error.evidence, error.category, error.attempts) == (
        Evidence.NOT_SENT,
        FailureCategory.INVALID_REQUEST,
        [],
    )
    for word in says:
        assert word in str(error), (word, str(error))
    assert server.connections_accepted == 0


async def test_an_unknown_option_is_a_type_error_naming_it(server: FaultServer) -> None:
    async with trio_retry.Client() as client:
        with pytest.raises(TypeError, match="header"):
            await client.get(server.url + "/", header={"X-A": "1"})  # type: ignore[call-arg]
    assert server.connections_accepted == 0


# (the public call, the misspelt option, the message)
MISSPELT: list[tuple[str, str, str]] = [
    # Before: "prepare() got an unexpected keyword argument 'header'".
    ("get", "header", "Client.get() got an unexpected keyword argument 'header'; "
     "did you mean 'headers'?"),
    ("post", "jsn", "Client.post() got an unexpected keyword argument 'jsn'; did you mean 'json'?"),
    ("request", "follow_redirect", "Client.request() got an unexpected keyword argument "
     "'follow_redirect'; did you mean 'follow_redirects'?"),
    ("stream", "idempotencykey", "Client.stream() got an unexpected keyword argument "
     "'idempotencykey'; did you mean 'idempotency_key'?"),
    ("put", "timeout", "Client.put() got an unexpected keyword argument 'timeout'; "
     "did you mean 'deadline' (seconds for the whole call, retries and backoffs included; each "
     "stage's own bound is Client(stage_timeouts=StageTimeouts(...)))?"),
    ("get", "timout", "Client.get() got an unexpected keyword argument 'timout'; "
     "did you mean 'deadline' (seconds for the whole call, retries and backoffs included; each "
     "stage's own bound is Client(stage_timeouts=StageTimeouts(...)))?"),
    ("delete", "config", "Client.delete() got an unexpected keyword argument 'config'; "
     "the options are: auth, content, cookies, data, deadline, files, follow_redirects, "
     "headers, hedging, idempotency, idempotency_key, json, params, reconcile, resume, retry"),
]  # fmt: skip


# (the misspelt or foreign Client option, the message): httpx's names get a hint like a typo.
CLIENT_MISSPELT: list[tuple[str, str]] = [
    # Before: "Client.__init__() got an unexpected keyword argument 'timeout'", and no hint.
    ("timeout", "Client() got an unexpected keyword argument 'timeout'; did you mean "
     "'deadline' (seconds for each whole call, retries and backoffs included) or "
     "'stage_timeouts' (StageTimeouts(connect=, tls=, write=, first_byte=, read=): each "
     "stage's own bound)?"),
    ("timout", "Client() got an unexpected keyword argument 'timout'; did you mean "
     "'deadline' (seconds for each whole call, retries and backoffs included) or "
     "'stage_timeouts' (StageTimeouts(connect=, tls=, write=, first_byte=, read=): each "
     "stage's own bound)?"),
    ("limits", "Client() got an unexpected keyword argument 'limits'; did you mean "
     "'max_connections', 'max_connections_per_origin' and 'keepalive_expiry' (the pool's "
     "limits are options of their own)?"),
    ("max_conections", "Client() got an unexpected keyword argument 'max_conections'; did you "
     "mean 'max_connections'?"),
]  # fmt: skip


@pytest.mark.parametrize(("option", "message"), CLIENT_MISSPELT)
def test_a_misspelt_client_option_names_the_nearest_one(option: str, message: str) -> None:
    with pytest.raises(TypeError) as info:
        trio_retry.Client(**{option: 1})
    assert str(info.value) == message
    assert info.value.__cause__ is None
    assert "__init__" not in str(info.value)


def test_a_type_error_of_a_known_client_option_is_left_alone() -> None:
    with pytest.raises(TypeError, match="telemetry must be") as info:
        trio_retry.Client(telemetry=3)  # type: ignore[arg-type]
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(("call", "option", "message"), MISSPELT)
async def test_a_misspelt_option_names_the_public_method_and_the_nearest_option(
    server: FaultServer, call: str, option: str, message: str
) -> None:
    url = server.url + "/"

    async def misspelt(client: trio_retry.Client) -> None:
        if call == "stream":
            async with client.stream("GET", url, **{option: 1}):
                pass
        elif call == "request":
            await client.request("GET", url, **{option: 1})
        else:
            await getattr(client, call)(url, **{option: 1})

    async with trio_retry.Client() as client:
        with pytest.raises(TypeError) as info:
            await misspelt(client)
    assert str(info.value) == message
    assert "prepare" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    assert server.connections_accepted == 0


async def test_an_empty_idempotency_key_can_no_longer_cause_a_second_execution(
    server: FaultServer,
) -> None:
    # Before: "" was sent as an empty Idempotency-Key and the POST retried as idempotent,
    # so the 503'd payment ran twice. Now nothing is sent at all.
    server.route("POST", "/pay", Respond(503), Respond(200))
    async with trio_retry.Client() as client:
        for key in ("", "  "):
            with pytest.raises(InvalidRequest, match="idempotency_key"):
                await client.post(server.url + "/pay", content=b"{}", idempotency_key=key)
    assert server.executed_count("POST", "/pay") == 0


async def test_valid_options_still_go_through(server: FaultServer) -> None:
    async with trio_retry.Client() as client:
        response = await client.post(
            server.url + "/pay",
            content=b"{}",
            deadline=5,
            idempotency=Idempotency.IDEMPOTENT,
            idempotency_key="order-17_v2",
            retry=RetryPolicy(max_attempts=1),
            follow_redirects=False,
            params={"a": 1, "b": [True, 2.5, "x"], "c": None},
            headers=[(b"X-Bytes", b"yes")],
        )
        assert response.status == 200
        await client.post(server.url + "/form", data={"n": 3, "tags": ["a", "b"]})
    first, second = server.requests
    assert first.header("idempotency-key") == "order-17_v2"
    assert first.path == "/pay?a=1&b=true&b=2.5&b=x"
    assert second.body == b"n=3&tags=a&tags=b"


# (Client keyword arguments, the exception, words of its message)
BAD_CLIENT_OPTIONS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"deadline": "2"}, TypeError, "deadline"),
    ({"deadline": 0}, ValueError, "deadline"),
    ({"retry": 3}, TypeError, "retry"),
    ({"auth": "user:pw"}, TypeError, "auth"),
    ({"auth": ("user", 5)}, TypeError, "auth"),
    ({"base_url": 5}, TypeError, "base_url"),
    ({"base_url": "ftp://files.example"}, ValueError, "base_url"),
    ({"proxy": "ftp://127.0.0.1:21"}, ValueError, "proxy"),
    ({"proxy": 3128}, TypeError, "proxy"),
    ({"headers": {"X-A": None}}, ValueError, "X-A"),
    ({"headers": {"X-A": "a\r\nX-B: 1"}}, ValueError, "X-A"),
    ({"stage_timeouts": 5}, TypeError, "stage_timeouts"),
    ({"upstreams": {"https://api.example": 3}}, TypeError, "upstreams"),
    ({"upstreams": {"ftp://api.example": trio_retry.Upstream()}}, ValueError, "upstreams"),
    ({"max_connections": 0}, ValueError, "max_connections"),
    ({"max_body_bytes": "1MB"}, TypeError, "max_body_bytes"),
    ({"max_redirects": -1}, ValueError, "max_redirects"),
    ({"http2": "yes"}, TypeError, "http2"),
    ({"pool_timeout": -1}, ValueError, "pool_timeout"),
    ({"keepalive_expiry": "5"}, TypeError, "keepalive_expiry"),
    ({"engine": object()}, TypeError, "engine"),
]


@pytest.mark.parametrize(("options", "kind", "says"), BAD_CLIENT_OPTIONS)
def test_a_bad_client_option_is_refused_at_construction(
    options: dict[str, Any], kind: type[Exception], says: str
) -> None:
    with pytest.raises(kind, match=says) as info:
        trio_retry.Client(**options)
    assert type(info.value) is kind  # not InvalidRequest: nothing was being sent


async def test_client_auth_as_a_pair_means_basic_auth(server: FaultServer) -> None:
    async with trio_retry.Client(auth=("aladdin", "opensesame")) as client:
        await client.get(server.url + "/")
    assert server.requests[0].header("authorization") == "Basic YWxhZGRpbjpvcGVuc2VzYW1l"
    assert "opensesame" not in repr(trio_retry.Client(auth=("aladdin", "opensesame")).config)


# Each field of StageTimeouts, and a value it refuses (issue #38 row 7): zero, negative, NaN and
# infinite limits used to be accepted and failed later (after three attempts, "closed by the
# client"), in trio's words (NaN), or not at all.
BAD_STAGE_LIMITS: list[tuple[str, object, str]] = [
    ("connect", 0, "got 0 (int)"),
    ("read", -5, "got -5 (int)"),
    ("write", 0.0, "got 0.0 (float)"),
    ("first_byte", math.nan, "got nan (float)"),
    ("tls", math.inf, "got inf (float)"),
    ("read", -math.inf, "got -inf (float)"),
    ("write", True, "got True (bool)"),
    ("first_byte", "30", "got '30' (str)"),
    ("connect", [1], "got [1] (list)"),
]


@pytest.mark.parametrize(("field", "value", "got"), BAD_STAGE_LIMITS)
def test_a_stage_limit_that_is_not_a_positive_finite_number_is_refused_at_construction(
    field: str, value: object, got: str
) -> None:
    with pytest.raises(ValueError, match="StageTimeouts") as info:
        trio_retry.StageTimeouts(**{field: value})  # type: ignore[arg-type]
    assert str(info.value) == (
        f"StageTimeouts.{field} must be a positive finite number of seconds or None "
        f"(no limit), {got}"
    )
    with pytest.raises(ValueError, match=f"StageTimeouts.{field}"):  # replace() checks too
        dataclasses.replace(trio_retry.StageTimeouts(), **{field: value})


def test_positive_finite_stage_limits_and_none_are_accepted() -> None:
    limits = trio_retry.StageTimeouts(connect=1, tls=0.25, write=30, first_byte=1e-3, read=None)
    assert (limits.connect, limits.tls, limits.write, limits.first_byte, limits.read) == (
        1,
        0.25,
        30,
        1e-3,
        None,
    )
