"""The ``Alt-Svc`` parser (``_call/h3route.parse_alt_svc``) on hostile values: the same answer
as a reference written the plain way (split at the commas and semicolons outside quoted
strings, character by character), for any value hypothesis makes of the characters that
matter; an ``ma`` of any length capped at 2^31 s (RFC 9111 §1.2.2), so ``clear`` still forgets
the route. How long a hostile value takes is measured, not asserted here: 64 KiB of the worst
shapes found cost under 1.2 ms on the development machine (the commit that made it linear says
which)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trio_retry._call.h3route import (
    DEFAULT_MAX_AGE,
    MAX_AGE_CAP,
    MAX_ALTERNATIVES,
    MAX_PARAMETERS,
    QuicRoutes,
    parse_alt_svc,
)
from trio_retry._models import Origin

HOST = "example.com"
K64 = 64 * 1024


def split_outside_quotes(text: str, delimiter: str) -> list[str]:
    """``text`` cut at each ``delimiter`` outside a quoted string (a backslash escapes the next
    character inside one; a quote never closed runs to the end)."""
    pieces, current, quoted, escaped = [], "", False, False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == delimiter and not quoted:
            pieces.append(current)
            current = ""
            continue
        current += char
    pieces.append(current)
    return pieces


def unquote(text: str) -> str | None:
    """The content of a whole quoted string, or ``None`` when ``text`` is not one."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return None
    out, escaped = "", False
    for char in text[1:-1]:
        if escaped:
            out += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            return None  # a quote inside: not one quoted string
        else:
            out += char
    return None if escaped else out


def digits(text: str) -> bool:
    return text != "" and all("0" <= c <= "9" for c in text)


def reference(value: str, host: str) -> tuple[int, float] | bool | None:
    if value.strip().lower() == "clear":
        return False
    alternatives = [a for a in split_outside_quotes(value, ",") if a.replace(";", "").strip()][
        :MAX_ALTERNATIVES
    ]
    for alternative in alternatives:
        first, *rest = split_outside_quotes(alternative, ";")
        parameters = [p for p in rest if p.strip()][:MAX_PARAMETERS]
        protocol, equals, quoted = first.partition("=")
        authority = unquote(quoted.strip())
        if protocol.strip() != "h3" or not equals or authority is None:
            continue
        alt_host, _, port = authority.rpartition(":")
        if alt_host.strip("[]") and alt_host.strip("[]").lower() != host.lower():
            continue
        if not digits(port) or not 0 < int(port) < 65536:
            continue
        max_age = DEFAULT_MAX_AGE
        for parameter in parameters:
            name, _, raw = parameter.partition("=")
            if name.strip().lower() != "ma":
                continue
            text = raw.strip()
            ma = unquote(text) if text.startswith('"') else text
            if ma is not None and digits(ma):
                # (more than 10 significant digits is past 2^31; int() refuses 4,300)
                long = len(ma.lstrip("0")) > 10
                max_age = MAX_AGE_CAP if long else min(float(int(ma)), MAX_AGE_CAP)
            break
        return int(port), max_age
    return None


ALPHABET = st.sampled_from(
    [
        "h3",
        "h2",
        "=",
        '"',
        ":",
        ";",
        ",",
        " ",
        "\\",
        "ma",
        "MA",
        "1",
        "0",
        "443",
        "9" * 12,
        "example.com",
        "EXAMPLE.com",
        "[",
        "]",
        "other",
        "x",
        "\t",
        "clear",
        "h3-29",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.lists(ALPHABET, max_size=40).map("".join))
@example('h3=":443"; ma=60')
@example('h2=":1", h3="example.com:444";ma="7"')
@example('h3=":1";' + ";x=1" * 40 + ";ma=5")  # ma past the parameters read
@example(",".join(['h2=":1"'] * (MAX_ALTERNATIVES - 1)) + ', h3=":2"')  # the last one read
@example(",".join(['h2=":1"'] * MAX_ALTERNATIVES) + ', h3=":2"')  # one past them
@example('h3="\\:443"')
@example('h3=":443"; ma="12\\"')
@example('"h3=":443"')
def test_the_parser_answers_as_the_reference(value: str) -> None:
    assert parse_alt_svc(value, HOST) == reference(value, HOST)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a" * 16000, None),  # the 16,000-character token run that stalled the loop
        ('h3=":443"; ' + "a" * (K64 - 12), (443, DEFAULT_MAX_AGE)),
        ('h3=":443"' + ";" * K64, (443, DEFAULT_MAX_AGE)),
        ("," * K64 + 'h3=":443"', (443, DEFAULT_MAX_AGE)),
        ('"' * K64, None),
        ('h3="' + '\\"' * (K64 // 2), None),
        ('h3=":443"; a=b' * (K64 // 15), (443, DEFAULT_MAX_AGE)),
        ('h3="other:1",' * (K64 // 13) + 'h3=":2"', None),  # past the alternatives read
        ('h3=":443"; ma=' + "9" * 400, (443, MAX_AGE_CAP)),
        ('h3=":443"; ma="' + "9" * K64 + '"', (443, MAX_AGE_CAP)),
        ('h3=":443"; ma=' + "0" * 400 + "60", (443, 60.0)),
        ('h3=":443"; ma=2147483649', (443, MAX_AGE_CAP)),
    ],
)
def test_hostile_values(value: str, expected: object) -> None:
    assert parse_alt_svc(value, HOST) == expected
    assert reference(value, HOST) == expected


async def test_clear_forgets_a_route_whatever_its_ma(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 400-digit ``ma`` became ``inf``: the route permanent (taken for a configured one),
    ``clear`` ignored."""
    origin = Origin.parse(f"https://{HOST}")
    routes = QuicRoutes(discover=True)
    routes.learn(origin, [(b"alt-svc", b'h3=":8443"; ma=' + b"9" * 400)])
    assert routes.port_for(origin) == 8443
    routes.learn(origin, [(b"alt-svc", b"clear")])
    assert routes.port_for(origin) is None
