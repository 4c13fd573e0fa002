"""Which origins are reached over HTTP/3, and which have shown it does not work there.

One job: the routing decision of SPEC §16, kept per origin, synchronous and clock-driven
(the run's clock: ``trio.current_time()``, so it is exact under ``MockClock``).

- An ``https://`` origin goes over HTTP/3 when its upstream says so (``Upstream(http3=True)``,
  in ``upstreams`` or as the ``default_upstream`` of every origin not listed there),
  or, with ``Client(http3=True)``, once it advertised ``Alt-Svc: h3=":PORT"`` on a response
  (remembered for its ``ma``, 24 hours by default, RFC 7838 §3, at most 2^31 s;
  ``Alt-Svc: clear`` forgets it). With ``state=``, what was learned outlives the process
  (:meth:`QuicRoutes.recall`, :meth:`QuicRoutes.remember`; ``_state/``), its expiry kept in
  wall-clock time.
  Only alternatives on the origin's own host are taken: another host would have to prove its
  authority for the origin with a certificate checked against a name the caller never gave.
- A QUIC handshake that fails marks the origin *broken*: it is reached over TCP until a
  back-off passes (5 minutes, doubling with each further failure, at most 6 hours), so a
  network that blocks UDP costs one failed handshake now and then, not one per request.
- A handshake slower than the fallback limit is not a failure: it goes on in the background
  while TCP serves the request, and the origin is *pending* meanwhile (reached over TCP, not
  broken). Its outcome decides: completed, the origin is reached over HTTP/3 again (on that
  connection, ``connect.py``); failed (QUIC gave up: its idle timeout, an ICMP error, a
  refused certificate), the origin is broken.

The pool keeps HTTP/3 connections apart from TCP ones (:func:`quic_key`): routing an origin to
HTTP/3 sends its next requests to a pool entry of their own, while TCP connections already
open finish what they carry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import trio

from .._models import Origin

if TYPE_CHECKING:
    from .._state.memory import ProtocolMemory

__all__ = ["QuicKey", "QuicRoutes", "parse_alt_svc", "quic_key"]

#: ``Alt-Svc`` lifetime when the header gives no ``ma`` (RFC 7838 §3.1).
DEFAULT_MAX_AGE = 86400.0
#: Back-off after a failed QUIC handshake: first, and the longest.
BROKEN_FIRST = 300.0
BROKEN_MAX = 6 * 3600.0

QuicKey = tuple[str, str, str, int]

#: The longest lifetime an ``ma`` gives: 2^31 seconds, where RFC 9111 §1.2.2 caps every
#: delta-seconds (a longer one, up to the 64 KiB a header may hold, means the same).
MAX_AGE_CAP = float(2**31)

#: A quoted string, to its closing quote or the end of the value.
_QUOTED_RUN = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?'
#: The pieces of an ``Alt-Svc`` value, left to right: a part (quoted strings and anything but
#: a delimiter), or a run of delimiters (``,`` between alternatives, ``;`` between an
#: alternative and its parameters) and the spaces among them. Each match consumes at least one
#: character and never gives any back (possessive): a value is read once, left to right.
#: The obvious alternative, one pattern per alternative found with ``finditer``, as before,
#: retried every position of a long run that never matched: 2-3 s for 16,000 characters,
#: ~45 s for 64 KiB.
_PIECE = re.compile(rf'(?:{_QUOTED_RUN}|[^",;]++)++|[,;][\s,;]*+', re.S)
#: The rest of an alternative, up to its comma (skipped past too many parameters).
_REST = re.compile(rf'(?:{_QUOTED_RUN}|[^",]++)*+', re.S)
#: Alternatives, and parameters of one, read at most: an advertisement names a few (RFC 7838
#: sets no limit; the header's 64 KiB could hold thousands, each costing Python work). An
#: ``h3`` alternative past them is not taken, nor an ``ma`` past them (the default applies).
MAX_ALTERNATIVES = 32
MAX_PARAMETERS = 32
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
_QUOTED_PAIR = re.compile(r"\\(.)", re.S)


def quic_key(origin: Origin) -> QuicKey:
    """The pool key of ``origin``'s HTTP/3 connections (distinct from its TCP ones)."""
    return ("h3", origin.scheme, origin.host, origin.port)


def parse_alt_svc(value: str, host: str) -> tuple[int, float] | Literal[False] | None:
    """The first usable ``h3`` alternative in an ``Alt-Svc`` value for ``host`` (RFC 7838
    §3): ``(port, max_age)``, ``max_age`` at most :data:`MAX_AGE_CAP`; ``False`` for
    ``clear``; ``None`` when it names no usable ``h3`` alternative (another protocol, another
    host, a malformed entry). Linear in the length of ``value``."""
    if value.strip().lower() == "clear":
        return False
    entry: list[str] = []  # the current alternative's ;-separated parts
    part = ""
    alternatives = 0
    at, end = 0, len(value)
    while at < end:
        piece = _PIECE.match(value, at)
        assert piece is not None  # (every character starts a piece)
        at = piece.end()
        text = piece.group()
        if text[0] != "," and text[0] != ";":
            part = text
            continue
        entry.append(part)
        part = ""
        last_comma = text.rfind(",")
        if last_comma < 0:
            if len(entry) <= MAX_PARAMETERS:
                continue
            rest = _REST.match(value, at)
            at = rest.end() if rest is not None else end
            continue  # (the comma that ends it, if any, is the next piece)
        found = _h3_alternative(entry, host)
        if found is not None:
            return found
        if any(p.strip() for p in entry):  # (nothing between two commas is no alternative)
            alternatives += 1
            if alternatives == MAX_ALTERNATIVES:
                return None
        # (parameters before any protocol: that alternative has none, and is not h3)
        entry = [""] if ";" in text[last_comma:] else []
    entry.append(part)
    return _h3_alternative(entry, host)


def _h3_alternative(parts: list[str], host: str) -> tuple[int, float] | None:
    """``(port, max_age)`` when ``parts`` (``protocol="authority"``, then parameters) is a
    usable ``h3`` alternative for ``host``."""
    protocol, equals, quoted = parts[0].partition("=")
    authority = _unquoted(quoted.strip())
    if protocol.strip() != "h3" or not equals or authority is None:
        return None
    alt_host, _, port_text = authority.rpartition(":")
    alt_host = alt_host.strip("[]")
    if alt_host and alt_host.lower() != host.lower():
        return None
    if not _digits(port_text) or not 0 < int(port_text) < 65536:
        return None
    port = int(port_text)
    for parameter in parts[1:]:
        name, _, raw = parameter.partition("=")
        if name.strip().lower() != "ma":
            continue
        text: str | None = raw.strip()
        if text and text[0] == '"':
            text = _unquoted(text)
        if text is None or not _digits(text):
            break  # an ma that is no number: the default lifetime
        significant = text.lstrip("0")
        # (int() of thousands of digits is slow, and refused past 4,300: cap by length first)
        if len(significant) > 10:
            return port, MAX_AGE_CAP
        return port, min(float(significant or 0), MAX_AGE_CAP)
    return port, DEFAULT_MAX_AGE


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _unquoted(text: str) -> str | None:
    """The content of the quoted string ``text`` (quoted pairs undone), or ``None``."""
    quoted = _QUOTED.fullmatch(text)
    if quoted is None:
        return None
    inner = quoted.group(1)
    return _QUOTED_PAIR.sub(r"\1", inner) if "\\" in inner else inner


@dataclass(slots=True)
class _Route:
    port: int
    expires: float  # math.inf for a configured route


@dataclass(slots=True)
class _Broken:
    until: float
    failures: int


class QuicRoutes:
    """The HTTP/3 routes of one client; see the module docstring."""

    __slots__ = (
        "_broken",
        "_everywhere",
        "_excluded",
        "_learned",
        "_pending",
        "_routes",
        "discover",
    )

    def __init__(
        self,
        *,
        discover: bool,
        configured: Iterable[Origin] = (),
        everywhere: bool = False,
        excluded: Iterable[Origin] = (),
    ) -> None:
        #: Learn routes from ``Alt-Svc`` (``Client(http3=True)``).
        self.discover = discover
        self._routes: dict[Origin, _Route] = {
            origin: _Route(origin.port, float("inf")) for origin in configured if origin.tls
        }
        self._broken: dict[Origin, _Broken] = {}
        #: Origins whose QUIC handshake goes on in the background (reached over TCP meanwhile).
        self._pending: set[Origin] = set()
        #: ``default_upstream=Upstream(http3=True)``: every ``https://`` origin but these.
        self._everywhere = everywhere
        self._excluded = frozenset(excluded)
        #: Origins whose advertisement changed since :meth:`remember` (learned or cleared).
        self._learned: set[Origin] = set()

    def port_for(self, origin: Origin) -> int | None:
        """The UDP port to reach ``origin`` on, if it goes over HTTP/3 now, else ``None``."""
        route = self._routes.get(origin)
        if route is None:
            if not (self._everywhere and origin.tls and origin not in self._excluded):
                return None
            route = self._routes[origin] = _Route(origin.port, float("inf"))
        now = trio.current_time()
        if route.expires <= now:
            del self._routes[origin]
            return None
        broken = self._broken.get(origin)
        if broken is not None and broken.until > now:
            return None
        if origin in self._pending:
            return None
        return route.port

    def learn(self, origin: Origin, headers: list[tuple[bytes, bytes]]) -> None:
        """Take what a response from ``origin`` says in ``Alt-Svc`` (only with discovery, and
        only over TLS: an advertisement in cleartext could be anyone's)."""
        if not self.discover or not origin.tls:
            return
        for name, raw in headers:
            if name.lower() != b"alt-svc":
                continue
            found = parse_alt_svc(raw.decode("latin-1"), origin.host)
            route = self._routes.get(origin)
            if found is False:
                if route is not None and route.expires != float("inf"):
                    del self._routes[origin]
                    self._learned.add(origin)
            elif found and (route is None or route.expires != float("inf")):
                port, max_age = found
                self._routes[origin] = _Route(port, trio.current_time() + max_age)
                self._learned.add(origin)
            return

    def recall(self, memory: ProtocolMemory, wall: float) -> None:
        """Take the advertisements ``memory`` kept (from the state file), ``wall`` being the
        wall-clock time now: each for what remains of its lifetime. Only with discovery; a
        configured route is never replaced."""
        if not self.discover:
            return
        now = trio.current_time()
        for entry in memory.recall("alt_svc"):
            origin = Origin("https", entry.host, entry.port)
            left = entry.expires - wall
            if left > 0 and origin not in self._routes:
                self._routes[origin] = _Route(entry.value["port"], now + left)

    def remember(self, memory: ProtocolMemory, wall: float) -> None:
        """Put the advertisements learned or cleared since the last call into ``memory``,
        their expiry as wall-clock time (``wall`` being now)."""
        from .._state.file import Entry

        now = trio.current_time()
        for origin in self._learned:
            route = self._routes.get(origin)
            where = (origin.host, origin.port)
            if route is None or route.expires == float("inf") or route.expires <= now:
                memory.forget("alt_svc", where)
            else:
                expires = wall + (route.expires - now)
                memory.keep("alt_svc", Entry(*where, expires, wall, {"port": route.port}))
        self._learned.clear()

    def mark_broken(self, origin: Origin) -> float:
        """A QUIC handshake with ``origin`` failed: reach it over TCP for a while. Returns
        the back-off chosen, in seconds."""
        self._pending.discard(origin)
        previous = self._broken.get(origin)
        failures = 1 if previous is None else previous.failures + 1
        backoff: float = min(BROKEN_FIRST * 2.0 ** (failures - 1), BROKEN_MAX)
        self._broken[origin] = _Broken(trio.current_time() + backoff, failures)
        return backoff

    def mark_broken_now(self, origin: Origin) -> None:
        """:meth:`mark_broken`, for a callback that returns nothing."""
        self.mark_broken(origin)

    def mark_working(self, origin: Origin) -> None:
        """A QUIC handshake with ``origin`` completed: its failures are forgotten."""
        self._pending.discard(origin)
        self._broken.pop(origin, None)

    def mark_pending(self, origin: Origin) -> None:
        """A QUIC handshake with ``origin`` outlasted the fallback limit and goes on in the
        background: TCP until it ends (:meth:`mark_working` or :meth:`mark_broken`)."""
        self._pending.add(origin)

    def pending(self, origin: Origin) -> bool:
        """Whether a QUIC handshake with ``origin`` goes on in the background."""
        return origin in self._pending

    def broken_until(self, origin: Origin) -> float | None:
        """When HTTP/3 will be tried at ``origin`` again, if it is marked broken."""
        broken = self._broken.get(origin)
        return None if broken is None else broken.until
