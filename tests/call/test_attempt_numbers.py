"""One numbering: an attempt's number is given when it starts (the tries the call started
before it, plus one) and is the same in the trail (``Attempt.number``), in the event hooks
(``HookRequest.attempt``, ``HookResponse.attempt``) and in the attempt's span. Every try is
numbered, those sent again uncounted included (a reconnect, an answered auth challenge);
what does not count against ``max_attempts`` is the engine's count, not the number.

Scripted on a FaultServer over loopback, on the MockClock."""

from __future__ import annotations

from collections.abc import Mapping

import trio
import trio.testing

import trio_retry
from trio_retry import AuthRequest, Backoff, Headers, Hedging, RetryPolicy, Upstream
from trio_retry._observe.hooks import HookRequest, HookResponse
from trio_retry.testing import FaultServer, Respond

QUICK = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.01, max=0.01, jitter="none"))


class Seen:
    """The attempt number each event hook was given, in the order the hooks ran."""

    def __init__(self) -> None:
        self.requests: list[int] = []
        self.responses: list[tuple[int, int]] = []  # (attempt, status)

    def request(self, request: HookRequest) -> None:
        self.requests.append(request.attempt)

    def response(self, response: HookResponse) -> None:
        self.responses.append((response.attempt, response.status))

    def hooks(self) -> dict[str, list[object]]:
        return {"request": [self.request], "response": [self.response]}


async def test_a_hedged_rounds_first_copy_wins_after_the_hedge_ended(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """The first copy answers 200 after the hedge (sent 0.1 s in) ended on a 503: both are in
    the trail, each with its own number (the loser first, the winner last: the attempt the
    call ended on), as the hooks saw them. Before: both were "attempt 2", and the hooks saw
    "attempt 1" for every copy."""
    server.script(Respond(200, body=b"first", delay=1.0), Respond(503))
    seen = Seen()
    async with trio_retry.Client(
        retry=QUICK,
        default_upstream=Upstream(hedging=Hedging(delay=0.1)),
        event_hooks=seen.hooks(),  # type: ignore[arg-type]
    ) as client:
        response = await client.get(server.url + "/item")
    assert response.content == b"first"
    assert [(a.number, a.status) for a in response.attempts] == [(2, 503), (1, 200)]
    assert sorted(seen.requests) == [1, 2]
    assert sorted(seen.responses) == [(1, 200), (2, 503)]
    assert trio.current_time() == 1.0  # the first copy's delay: no retry round after it


async def test_after_a_hedged_round_the_next_attempt_is_numbered_after_every_copy(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A round of two copies ending on 503s, then a retry: the retry is attempt 3 in the
    trail and in the hooks."""
    server.script(Respond(503, delay=1.0), Respond(503), Respond(200))
    seen = Seen()
    async with trio_retry.Client(
        retry=QUICK,
        default_upstream=Upstream(hedging=Hedging(delay=0.1)),
        event_hooks=seen.hooks(),  # type: ignore[arg-type]
    ) as client:
        response = await client.get(server.url + "/item")
    assert response.status == 200
    numbers = [a.number for a in response.attempts]
    assert sorted(numbers[:2]) == [1, 2]
    assert numbers[2] == 3
    assert response.attempts[-1].status == 200
    assert sorted(seen.requests) == [1, 2, 3]


class ChallengedAuth:
    """A ``RequestAuth`` with ``challenge()``: no credentials until a 401 asks for them."""

    def __init__(self) -> None:
        self.answered = False

    async def sign(self, request: AuthRequest) -> Mapping[str, str]:
        return {"Authorization": "Token answered"} if self.answered else {}

    async def challenge(self, request: AuthRequest, response_headers: Headers) -> bool:
        self.answered = True
        return True


async def test_an_answered_challenge_is_numbered_as_it_is_recorded(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A 401 whose challenge the auth answers, then a 200: the hooks saw attempts 1 and 2, as
    the trail records them (before: the hooks saw 1 twice, the trail 1 and 2)."""
    server.script(Respond(401, headers={"WWW-Authenticate": "Token"}), Respond(200))
    seen = Seen()
    async with trio_retry.Client(
        retry=QUICK,
        auth=ChallengedAuth(),
        event_hooks=seen.hooks(),  # type: ignore[arg-type]
    ) as client:
        response = await client.get(server.url + "/item")
    assert response.status == 200
    assert [(a.number, a.status) for a in response.attempts] == [(1, 401), (2, 200)]
    assert seen.requests == [1, 2]
    assert seen.responses == [(1, 401), (2, 200)]
    assert ("authorization", "Token answered") in server.requests[1].headers


async def test_an_answered_challenge_does_not_count_against_max_attempts(
    server: FaultServer, autojump_clock: trio.testing.MockClock
) -> None:
    """``max_attempts=2``: a 401 answered, a 503, then the 200 of the second counted attempt
    (docs/reference.md: the 401 "does not count against max_attempts"). Before, the answered
    401 was counted and the 503 ended the call."""
    server.script(Respond(401, headers={"WWW-Authenticate": "Token"}), Respond(503), Respond(200))
    async with trio_retry.Client(
        retry=RetryPolicy(max_attempts=2, backoff=Backoff(initial=0.01, jitter="none")),
        auth=ChallengedAuth(),
    ) as client:
        response = await client.get(server.url + "/item")
    assert response.status == 200
    assert [(a.number, a.status) for a in response.attempts] == [(1, 401), (2, 503), (3, 200)]
    assert [a.decision is None for a in response.attempts] == [True, False, True]
