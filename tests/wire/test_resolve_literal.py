"""An address literal is resolved without trio's look-up (``transport._literal_addresses``,
issue #41): the same addresses as ``trio.socket.getaddrinfo`` gives (its own first,
numeric-only try), and a checkpoint as trio's, with no frame of trio's look-up held across it
while thousands of calls start at once; a name, or anything the numeric try refuses, still
goes to trio's way."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio
import trio.testing

from trio_retry import Evidence, Stage
from trio_retry._wire import transport
from trio_retry._wire.progress import WireError

LITERALS = ["127.0.0.1", "::1", "10.1.2.3", "fe80::1", "0.0.0.0", "::ffff:127.0.0.1", "[::1]"]
NOT_LITERALS = ["localhost", "example.invalid", "999.1.1.1", "1.2.3.4.5", "", "::1%nosuchif"]


@pytest.mark.parametrize("host", LITERALS + NOT_LITERALS)
@pytest.mark.parametrize("port", [80, 65535])
async def test_a_literal_gets_trios_addresses_and_anything_else_none(host: str, port: int) -> None:
    for name in (host, host.encode("ascii")):
        mine = transport._literal_addresses(name, port)
        try:
            trios: Any = trio.socket.getaddrinfo(
                name, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
            )
            expected = await trios
        except (OSError, UnicodeError):
            expected = None
        assert mine == expected, name


async def test_a_literal_is_resolved_without_trios_look_up_and_is_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []
    real = trio.socket.getaddrinfo

    async def recorded(host: object, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(trio.socket, "getaddrinfo", recorded)
    with trio.testing.assert_checkpoints():
        infos = await transport._resolve("127.0.0.1", 8080)
    assert infos == [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 8080))]
    assert asked == []
    await transport._resolve("localhost", 8080)
    assert asked == [b"localhost"]  # (a name: trio's way, as before)
    with trio.CancelScope() as scope:
        scope.cancel()
        await transport._resolve("127.0.0.1", 8080)
    assert scope.cancelled_caught


async def test_a_name_that_does_not_resolve_is_still_a_dns_failure() -> None:
    with pytest.raises(WireError) as caught, trio.fail_after(10):
        await transport._resolve("no-such-host.invalid", 80)
    assert (caught.value.stage, caught.value.evidence) == (Stage.DNS, Evidence.NOT_SENT)
