"""``Client(...)``'s options are written once: the :class:`ClientOptions` table (names, types,
defaults). The constructor's signature is the table's, for ``inspect``/``help()`` as for a
type checker (tests/test_typing.py checks the call site); ``configure`` takes the table and is
the one place of the checks (their messages: tests/call/test_validation.py)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import trio_retry
from trio_retry import RetryPolicy, StageTimeouts
from trio_retry._call.client_options import DEFAULT_STAGE_TIMEOUTS, ClientOptions
from trio_retry._call.config import configure


def test_the_constructor_takes_the_table() -> None:
    table = dataclasses.fields(ClientOptions)
    parameters = list(inspect.signature(trio_retry.Client).parameters.values())
    assert [p.name for p in parameters] == [f.name for f in table]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert [p.default for p in parameters] == [f.default for f in table]
    # (a default told apart from the same value given explicitly shows as that value)
    shown = {p.name: repr(p.default) for p in parameters}
    assert (shown["http2"], shown["telemetry"], shown["pool_timeout"]) == ("True", "None", "5.0")


def test_the_table_is_frozen_and_keyword_only() -> None:
    options = ClientOptions(max_connections=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_connections = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        ClientOptions(None)  # type: ignore[misc]


def test_the_client_is_configured_from_the_table() -> None:
    """What ``Client(**kw)`` reads is ``configure(ClientOptions(**kw))``."""
    given = {"max_connections": 7, "deadline": 2, "retry": RetryPolicy(max_attempts=5)}
    config = trio_retry.Client(**given).config  # type: ignore[arg-type]
    direct = configure(ClientOptions(**given))  # type: ignore[arg-type]
    for name in ("max_connections", "deadline", "retry", "stage_timeouts", "http2"):
        assert getattr(config, name) == getattr(direct, name)
    assert (config.max_connections, config.deadline, config.retry.max_attempts) == (7, 2.0, 5)
    assert configure(ClientOptions()).stage_timeouts == DEFAULT_STAGE_TIMEOUTS
    assert configure(ClientOptions(stage_timeouts=None)).stage_timeouts == StageTimeouts()


def test_headers_and_cookies_are_checked_with_the_rest() -> None:
    client = trio_retry.Client(headers={"User-Agent": "mine", "X-A": "1"}, cookies=True)
    assert client.headers["user-agent"] == "mine"
    assert client.headers["x-a"] == "1"
    assert client.cookies is not None
    assert client.cookies is client.config.cookies
    with pytest.raises(ValueError, match=r"^headers: "):
        trio_retry.Client(headers={"X-A": "a\r\nb"})
    with pytest.raises(TypeError, match=r"^cookies= on the client is True"):
        trio_retry.Client(cookies={"sid": "1"})  # type: ignore[arg-type]


def test_a_positional_argument_says_the_options_are_keywords() -> None:
    with pytest.raises(TypeError, match=r"^Client\(\) takes keyword arguments only, got 1 "):
        trio_retry.Client(RetryPolicy())  # type: ignore[misc]
