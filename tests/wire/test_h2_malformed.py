"""The per-stream validation of HTTP/2 response heads (RFC 9113 §8.1.1, §8.2, §8.3).

h2's own inbound validation is off (it would turn every malformed response into a connection
error); ``_malformed`` must refuse what h2 refused, and accept what it accepted.
"""

from __future__ import annotations

import pytest

from trio_retry._wire.h2.headers import malformed as _malformed

OK = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"x-empty", b"")]


@pytest.mark.parametrize(
    ("headers", "trailers", "says"),
    [
        ([(b"x", b"v")], False, "no :status"),
        ([(b":status", b"200"), (b":status", b"200")], False, "duplicate :status"),
        ([(b":status", b"2000")], False, "invalid :status"),
        ([(b":status", b"abc")], False, "invalid :status"),
        ([(b"x", b"v"), (b":status", b"200")], False, "after a regular header"),
        ([(b":status", b"200"), (b":path", b"/")], False, "in a response"),
        ([(b":status", b"200"), (b":weird", b"1")], False, "in a response"),
        ([(b":status", b"200"), (b"", b"v")], False, "empty header name"),
        ([(b":status", b"200"), (b"X-Upper", b"v")], False, "uppercase header name"),
        ([(b":status", b"200"), (b"a b", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"a:b", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"caf\xc3\xa9", b"v")], False, "invalid header name"),
        ([(b":status", b"200"), (b"x", b"a\r\nb")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b"a\x00")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b" padded")], False, "invalid value"),
        ([(b":status", b"200"), (b"x", b"padded\t")], False, "invalid value"),
        ([(b":status", b"200"), (b"connection", b"close")], False, "connection-specific"),
        ([(b":status", b"200"), (b"transfer-encoding", b"chunked")], False, "connection-specific"),
        ([(b":status", b"200"), (b"te", b"gzip")], False, "TE"),
        ([(b":status", b"200")], True, "pseudo-header"),
    ],
)
def test_a_malformed_head_is_named(
    headers: list[tuple[bytes, bytes]], trailers: bool, says: str
) -> None:
    problem = _malformed(headers, trailers=trailers)
    assert problem is not None
    assert says in problem


@pytest.mark.parametrize(
    ("headers", "trailers"),
    [
        (OK, False),
        ([(b":status", b"103"), (b"link", b"</a.css>; rel=preload")], False),
        ([(b":status", b"204")], False),
        ([(b":status", b"200"), (b"te", b"Trailers")], False),
        ([(b":status", b"200"), (b"x", b"inner  spaces\tand tabs")], False),
        ([(b":status", b"200"), (b"x", b"caf\xc3\xa9")], False),  # obs-text values pass
        ([(b"grpc-status", b"0")], True),
        ([], True),
    ],
)
def test_a_valid_head_passes(headers: list[tuple[bytes, bytes]], trailers: bool) -> None:
    assert _malformed(headers, trailers=trailers) is None
