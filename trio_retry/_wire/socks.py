"""The SOCKS5 handshake (RFC 1928, username/password RFC 1929) over an open Trio stream.

socksio (extra ``socks``) encodes the messages and tracks the protocol state; this module does
the I/O. socksio parses each reply from exactly the bytes it is handed and keeps no buffer, so
the reads here are framed: the fixed part of a reply first, then the rest its address type
says, so a reply split across TCP segments parses the same. Each reply's version byte is
checked here (socksio skips it on two of the three).

Everything here happens before a byte of the request exists: every failure (the proxy
refusing, asking for a method we do not offer, rejecting the credentials, failing to reach the
target, closing, or answering garbage) is ``NOT_SENT`` at ``CONNECT``.
"""

from __future__ import annotations

import ipaddress

import trio

from .._core.evidence import Evidence, FailureCategory, Stage
from .._proxy import load_socksio
from .progress import WireError

__all__ = ["socks5_handshake"]

MISSING_EXTRA = "SOCKS proxies need the 'socks' extra (socksio): pip install 'trio_retry[socks]'"

_REPLY_TEXT = {
    b"\x01": "general SOCKS server failure",
    b"\x02": "connection not allowed by ruleset",
    b"\x03": "network unreachable",
    b"\x04": "host unreachable",
    b"\x05": "connection refused by the target",
    b"\x06": "TTL expired",
    b"\x07": "command not supported",
    b"\x08": "address type not supported",
}


def _fail(message: str) -> WireError:
    return WireError(
        message, stage=Stage.CONNECT, evidence=Evidence.NOT_SENT, category=FailureCategory.CONNECT
    )


def _versioned(reply: bytes, versions: tuple[int, ...], which: str, via: str) -> bytes:
    """``reply`` if its first byte is one of ``versions``: socksio reads a method selection
    reply's method without looking at its version, so a SOCKS4 answer (``04 00``) would pass
    for "no authentication" and the CONNECT that follows would wait for an answer that never
    comes."""
    if reply[0] not in versions:
        raise _fail(
            f"the SOCKS proxy {via} answered with a malformed SOCKS5 {which} reply (version "
            f"{reply[0]}, not {' or '.join(map(str, versions))}): is it a SOCKS5 proxy?"
        )
    return reply


class _Reader:
    __slots__ = ("_buffer", "_stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            data = await self._stream.receive_some(4096)
            if not data:
                raise _fail("the SOCKS proxy closed the connection during the handshake")
            self._buffer += data
        out = bytes(self._buffer[:count])
        del self._buffer[:count]
        return out


async def socks5_handshake(
    stream: trio.abc.Stream,
    host: str,
    port: int,
    *,
    username: str | None,
    password: str | None,
    via: str,
) -> None:
    """Open a SOCKS5 ``CONNECT`` tunnel to ``host:port`` through ``stream``.

    ``host`` is sent as it is: an IP literal as an address, anything else as a domain name for
    the proxy to resolve (``socks5h``; for ``socks5`` the caller resolved it already). Raises
    :class:`WireError` (``NOT_SENT``, ``CONNECT``); on cancellation the caller closes the
    stream, and nothing of the request was sent.
    """
    socks5 = load_socksio()
    from socksio.exceptions import SOCKSError

    conn = socks5.SOCKS5Connection()
    reader = _Reader(stream)
    methods = [socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED]
    if username is not None:
        methods.append(socks5.SOCKS5AuthMethod.USERNAME_PASSWORD)
    try:
        conn.send(socks5.SOCKS5AuthMethodsRequest(methods))
        await stream.send_all(conn.data_to_send())
        reply = conn.receive_data(
            _versioned(await reader.exactly(2), (5,), "method selection", via)
        )
        if reply.method == socks5.SOCKS5AuthMethod.USERNAME_PASSWORD and username is not None:
            user, secret = username.encode(), (password or "").encode()
            conn.send(socks5.SOCKS5UsernamePasswordRequest(user, secret))
            await stream.send_all(conn.data_to_send())
            # RFC 1929 says 1; some servers send 5, which curl accepts too.
            answer = _versioned(await reader.exactly(2), (1, 5), "username/password", via)
            if not conn.receive_data(answer).success:
                raise _fail(f"the SOCKS proxy {via} rejected the username and password")
        elif reply.method != socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED:
            raise _fail(
                f"the SOCKS proxy {via} requires authentication (put user:password@ in the "
                "proxy URL)"
                if username is None
                else f"the SOCKS proxy {via} accepts none of the authentication methods offered"
            )
        try:
            ipaddress.ip_address(host)
            address = host
        except ValueError:
            address = host.encode("idna").decode("ascii")
        conn.send(
            socks5.SOCKS5CommandRequest.from_address(socks5.SOCKS5Command.CONNECT, (address, port))
        )
        await stream.send_all(conn.data_to_send())
        head = _versioned(await reader.exactly(4), (5,), "CONNECT", via)
        atype = head[3:4]
        if atype == b"\x01":
            rest = await reader.exactly(4 + 2)
        elif atype == b"\x04":
            rest = await reader.exactly(16 + 2)
        elif atype == b"\x03":
            length = await reader.exactly(1)
            rest = length + await reader.exactly(length[0] + 2)
        else:
            raise _fail(f"the SOCKS proxy {via} answered with a malformed reply")
        answer = conn.receive_data(head + rest)
        if answer.reply_code != socks5.SOCKS5ReplyCode.SUCCEEDED:
            reason = _REPLY_TEXT.get(bytes(answer.reply_code), "an unknown error")
            raise _fail(f"the SOCKS proxy {via} could not connect to {host}:{port}: {reason}")
    except WireError:
        raise
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise _fail(f"the SOCKS proxy {via} failed during the handshake: {exc}") from exc
    except (SOCKSError, ValueError, UnicodeError) as exc:
        raise _fail(f"the SOCKS proxy {via} answered with a malformed reply: {exc}") from exc
