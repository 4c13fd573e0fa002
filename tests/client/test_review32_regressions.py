"""Regressions found by reading issue #32's changes: a redirect not followed keeps the call's
true evidence; the cookie jar never sees userinfo; secrets stay hidden in the messages of
malformed or long Locations; userinfo that cannot be Basic credentials is InvalidRequest;
AdmissionRejected pickles."""

from __future__ import annotations

import copy
import pickle
from http.cookiejar import CookieJar

import pytest
import trio

import trio_retry
from trio_retry import AdmissionRejected, Evidence, RejectReason
from trio_retry._models import shown_url
from trio_retry.testing import FaultServer, Respond


@pytest.mark.parametrize("location", ["ftp://x/", "http://a..b/", "file:///etc/passwd"])
async def test_a_redirect_not_followed_keeps_the_answered_requests_evidence(
    nursery: trio.Nursery, location: str
) -> None:
    """The POST was answered (303): the call's evidence is RESPONSE_RECEIVED, with the
    response's attempts, never NOT_SENT (a caller that sends NOT_SENT calls again would run
    the POST twice); nothing was sent for the hop."""
    server = FaultServer()
    await nursery.start(server.serve)
    server.route("POST", "/p", Respond(303, headers=[("location", location)]))
    async with trio_retry.Client(follow_redirects=True) as client:
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.post(server.url + "/p", content=b"x")
    assert info.value.evidence is Evidence.RESPONSE_RECEIVED
    assert [a.status for a in info.value.attempts] == [303]
    assert server.executed_count("POST", "/p") == 1
    assert len(server.requests) == 1  # nothing for the hop


async def test_the_cookie_jar_never_sees_userinfo(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    server.route("GET", "/login", Respond(200, headers=[("set-cookie", "sid=S3T; Path=/")]))
    jar = CookieJar()
    secret_url = server.url.replace("127.0.0.1", "user:P4SSzq@127.0.0.1")
    async with trio_retry.Client(cookies=jar) as client:
        await client.get(secret_url + "/login")
        await client.get(server.url + "/next")
    assert "P4SS" not in repr(jar)
    assert "p4ss" not in repr(jar).lower()
    assert dict(server.requests[-1].headers).get("cookie") == "sid=S3T"


def test_malformed_and_long_locations_are_redacted_before_they_are_cut() -> None:
    token = "T" * 250
    assert token[:20] not in shown_url(f"http://user:{token}@h:99999/", loose=True)[:200]
    assert "pa?ss" not in shown_url("http://user:pa?ss@host.example/", loose=True)
    assert shown_url("http://user:pa?ss@host.example/", loose=True) == (
        "http://[redacted]@host.example/"
    )
    assert "P4/SS" not in shown_url("http://user:P4/SS@h:99999/", loose=True)
    assert "K3Y" not in shown_url("http://h/p?page=2;api_key=K3Y")


async def test_userinfo_that_cannot_be_basic_credentials_is_invalid_request(
    nursery: trio.Nursery,
) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    async with trio_retry.Client() as client:
        with pytest.raises(trio_retry.InvalidRequest) as info:
            await client.get(server.url.replace("127.0.0.1", "us%3Aer:pw@127.0.0.1") + "/")
    assert info.value.evidence is Evidence.NOT_SENT
    assert "pw" not in str(info.value)
    assert server.requests == []


async def test_an_empty_userinfo_sends_no_credentials(nursery: trio.Nursery) -> None:
    server = FaultServer()
    await nursery.start(server.serve)
    async with trio_retry.Client() as client:
        await client.get(server.url.replace("//", "//@") + "/")
    assert "authorization" not in dict(server.requests[-1].headers)


def test_admission_rejected_survives_pickle_and_copy() -> None:
    error = AdmissionRejected("not admitted", reason=RejectReason.BULKHEAD_FULL)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is AdmissionRejected
        assert again.reason is RejectReason.BULKHEAD_FULL
        assert str(again) == "not admitted"
        assert again.evidence is Evidence.NOT_SENT
