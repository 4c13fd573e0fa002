"""`StaticFile`: a body served the way a static file server serves it (validators, byte
ranges, RFC 9110 §13.1.5 and §14), with per-response faults a test scripts: cut after N bytes,
the representation changed, a wrong ``Content-Range``, a 200 to a ``Range``, a forced status.
Pure: each request's record in, an action out (`Respond`, or `PartialBody` for a cut), which
`FaultServer` carries out on HTTP/1.1, HTTP/2 and HTTP/3 alike."""

from __future__ import annotations

import collections
import email.utils
import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from ._script import PartialBody, RecordedRequest, Respond, ScriptError

__all__ = ["StaticFile"]

#: The first Last-Modified of every file (2026-01-01T00:00:00Z); each change adds an hour.
_EPOCH = 1767225600
_RANGE = re.compile(r"bytes=(\d*)-(\d*)", re.IGNORECASE)

_Auto = Literal["auto"]


@dataclass(frozen=True, slots=True)
class _Representation:
    body: bytes
    etag: str | None
    last_modified: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Play:
    """What one response does differently (`StaticFile.script`)."""

    cut_after: int | None = None
    reset: bool = False
    change: _Representation | None = None
    ignore_range: bool = False
    content_range: str | None = None
    status: int | None = None


def _strong_match(if_range: str, etag: str | None) -> bool:
    # RFC 9110 §8.8.3.2: strong comparison; a weak tag matches nothing.
    return etag is not None and not etag.startswith("W/") and if_range == etag


class StaticFile:
    """A static body, for `FaultServer.route` (``server.route("GET", "/file", static)``; it
    answers ``GET`` and ``HEAD``, and every request of the route).

    Every response carries ``ETag`` (`etag`: by default a strong tag made from the body;
    None: no header), ``Last-Modified`` (by default 2026-01-01, an hour later at each change;
    None: no header), ``Accept-Ranges: bytes`` (unless `accept_ranges` is False: then a
    ``Range`` is ignored too), `content_type`, and `content_encoding` when given (the body is
    then the encoded bytes, and ranges count them).

    A ``GET`` with ``Range: bytes=N-``, ``bytes=N-M`` or ``bytes=-S`` is answered ``206`` with
    its ``Content-Range``, when ``If-Range`` (if sent) matches: the ETag compared strongly, or
    the Last-Modified date exactly; otherwise, or for several ranges or a malformed one, the
    whole body with 200. A range starting at or past the end is ``416`` with ``Content-Range:
    bytes */LENGTH``.

    `script` queues what the next responses do differently; `change` replaces the
    representation at once. `ranges` records each request's ``Range`` (None: absent) in
    arrival order.
    """

    def __init__(
        self,
        body: bytes,
        *,
        etag: str | _Auto | None = "auto",
        last_modified: str | _Auto | None = "auto",
        accept_ranges: bool = True,
        content_type: str = "application/octet-stream",
        content_encoding: str | None = None,
    ) -> None:
        self._version = 0
        self.current = self._representation(bytes(body), etag, last_modified)
        self.accept_ranges = accept_ranges
        self.content_type = content_type
        self.content_encoding = content_encoding
        self._plays: collections.deque[_Play] = collections.deque()
        #: Each request's ``Range`` header (None: absent), in arrival order.
        self.ranges: list[str | None] = []

    def _representation(
        self, body: bytes, etag: str | _Auto | None, last_modified: str | _Auto | None
    ) -> _Representation:
        if etag == "auto":
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        if last_modified == "auto":
            last_modified = email.utils.formatdate(_EPOCH + 3600 * self._version, usegmt=True)
        return _Representation(body, etag, last_modified)

    @property
    def body(self) -> bytes:
        """The body served now."""
        return self.current.body

    @property
    def etag(self) -> str | None:
        """The ``ETag`` served now."""
        return self.current.etag

    @property
    def last_modified(self) -> str | None:
        """The ``Last-Modified`` served now."""
        return self.current.last_modified

    def change(
        self,
        body: bytes,
        *,
        etag: str | _Auto | None = "auto",
        last_modified: str | _Auto | None = "auto",
    ) -> None:
        """Serve `body` from now on: a new representation, with its own validators (by
        default a new strong ETag and a Last-Modified an hour later)."""
        self._version += 1
        self.current = self._representation(bytes(body), etag, last_modified)

    def script(
        self,
        *,
        cut_after: int | None = None,
        reset: bool = False,
        change: bytes | None = None,
        etag: str | _Auto | None = "auto",
        last_modified: str | _Auto | None = "auto",
        ignore_range: bool = False,
        content_range: str | None = None,
        status: int | None = None,
    ) -> None:
        """Queue what the next response (after those already queued) does differently.

        `change`: before answering, the representation becomes `change` (with `etag` and
        `last_modified`, as in `change`). `status`: answer that status, without a body (a
        416 with ``Content-Range: bytes */LENGTH``). `ignore_range`: the whole body with 200,
        whatever ``Range`` says. `content_range`: a 206 sends this ``Content-Range`` value
        instead of the true one (the body is still the range asked for). `cut_after`: the
        response (200 or 206) declares its whole length and breaks off after that many body
        bytes (HTTP/1.1: FIN; HTTP/2, HTTP/3: the stream reset), `reset`: the connection reset
        instead (see `PartialBody`).
        """
        if cut_after is not None and (isinstance(cut_after, bool) or cut_after < 0):
            raise ValueError(f"cut_after must be a number of bytes >= 0, got {cut_after!r}")
        if status is not None:
            Respond(status)  # 200..599, or ValueError
        new: _Representation | None = None
        if change is not None:
            self._version += 1
            new = self._representation(bytes(change), etag, last_modified)
        self._plays.append(
            _Play(
                cut_after=cut_after,
                reset=reset,
                change=new,
                ignore_range=ignore_range,
                content_range=content_range,
                status=status,
            )
        )

    @property
    def scripted(self) -> int:
        """How many scripted responses are still queued."""
        return len(self._plays)

    def _headers(self, length: int | None) -> list[tuple[str, str]]:
        current = self.current
        headers = [("Content-Type", self.content_type)]
        if self.content_encoding is not None:
            headers.append(("Content-Encoding", self.content_encoding))
        if current.etag is not None:
            headers.append(("ETag", current.etag))
        if current.last_modified is not None:
            headers.append(("Last-Modified", current.last_modified))
        if self.accept_ranges:
            headers.append(("Accept-Ranges", "bytes"))
        if length is not None:
            headers.append(("Content-Length", str(length)))
        return headers

    def _range(self, request: RecordedRequest, play: _Play) -> tuple[int, int] | str | None:
        """The (first, last) byte range to send, None for the whole body, or ``"416"``."""
        header = request.header("range")
        if header is None or play.ignore_range or not self.accept_ranges:
            return None
        if request.method.upper() != "GET":
            return None
        if_range = request.header("if-range")
        if if_range is not None:
            current = self.current
            if if_range.startswith(('"', "W/")):
                if not _strong_match(if_range, current.etag):
                    return None
            elif if_range != current.last_modified:
                return None
        match = _RANGE.fullmatch(header.strip())
        size = len(self.current.body)
        if match is None or match.group(1) == match.group(2) == "":
            return None  # malformed, or several ranges: ignored (RFC 9110 §14.2)
        first_text, last_text = match.groups()
        if first_text == "":
            suffix = int(last_text)
            if suffix == 0 or size == 0:
                return "416"
            return max(0, size - suffix), size - 1
        first = int(first_text)
        if last_text != "" and int(last_text) < first:
            return None  # invalid: ignored
        if first >= size:
            return "416"
        return first, size - 1 if last_text == "" else min(int(last_text), size - 1)

    def __call__(self, request: RecordedRequest) -> Respond | PartialBody:
        """The response to `request` (see the class)."""
        self.ranges.append(request.header("range"))
        play = self._plays.popleft() if self._plays else _Play()
        if play.change is not None:
            self.current = play.change
        size = len(self.current.body)
        if request.method.upper() not in ("GET", "HEAD"):
            return Respond(405, headers={"Allow": "GET, HEAD"})
        if play.status is not None:
            headers = self._headers(None)
            if play.status == 416:
                headers.append(("Content-Range", f"bytes */{size}"))
            return Respond(play.status, headers=headers)
        wanted = self._range(request, play)
        if wanted == "416":
            headers = [*self._headers(0), ("Content-Range", f"bytes */{size}")]
            return Respond(416, headers=headers)
        status = 200
        body = self.current.body
        headers = self._headers(size)
        if isinstance(wanted, tuple):
            first, last = wanted
            status = 206
            body = body[first : last + 1]
            content_range = play.content_range or f"bytes {first}-{last}/{size}"
            headers = [*self._headers(len(body)), ("Content-Range", content_range)]
        if play.cut_after is None or request.method.upper() == "HEAD":
            return Respond(status, headers=headers, body=body)
        if play.cut_after >= len(body):
            raise ScriptError(
                f"StaticFile: cut_after={play.cut_after} is not inside this {status} "
                f"response's {len(body)} body bytes"
            )
        return PartialBody(
            status,
            headers=headers,
            declared_length=len(body),
            body=body[: play.cut_after],
            reset=play.reset,
        )
