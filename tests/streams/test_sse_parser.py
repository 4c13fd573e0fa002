"""The event-stream parser (trio_retry/_sse.py) against the WHATWG standard ("Server-sent
events", §9.2.5-9.2.6): the standard's own examples, each rule on its own, and two properties
checked with hypothesis over generated streams: any split of the bytes gives the same events,
and those are the events a literal, character-by-character reading of the standard gives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_retry import SSEEvent
from trio_retry._sse import SSEParser


def parse(*chunks: bytes, last_event_id: str = "") -> list[SSEEvent]:
    parser = SSEParser(last_event_id)
    return [event for chunk in chunks for event in parser.feed(chunk)]


def ev(data: str, event: str = "message", id: str | None = None, retry: int | None = None):
    return SSEEvent(event=event, data=data, id=id, retry=retry)


# -- the standard's examples (§9.2.1, §9.2.6) ---------------------------------------------------

SPEC_EXAMPLES = [
    pytest.param(
        b"data: This is the first message.\n\n"
        b"data: This is the second message, it\ndata: has two lines.\n\n"
        b"data: This is the third message.\n\n",
        [
            ev("This is the first message."),
            ev("This is the second message, it\nhas two lines."),
            ev("This is the third message."),
        ],
        id="introduction-three-messages",
    ),
    pytest.param(
        b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n",
        [ev("73857293", "add"), ev("2153", "remove"), ev("113411", "add")],
        id="introduction-event-types",
    ),
    pytest.param(
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
        b"data:  third event\n\n",
        [ev("first event", id="1"), ev("second event"), ev(" third event")],
        id="test-stream-id-reset-and-one-space",
    ),
    pytest.param(
        b"data\n\ndata\ndata\n\ndata:",
        [ev(""), ev("\n")],
        id="empty-data-and-unfinished-last-block",
    ),
    pytest.param(b"data:test\n\ndata: test\n\n", [ev("test"), ev("test")], id="space-optional"),
]


@pytest.mark.parametrize(("stream", "expected"), SPEC_EXAMPLES)
def test_the_standards_examples(stream: bytes, expected: list[SSEEvent]) -> None:
    assert parse(stream) == expected
    assert parse(*[stream[i : i + 1] for i in range(len(stream))]) == expected


# -- each rule ----------------------------------------------------------------------------------


def test_line_ends_cr_lf_and_crlf_mixed() -> None:
    stream = b"data: a\rdata: b\ndata: c\r\n\r\ndata: d\r\rdata: e\n\n"
    assert parse(stream) == [ev("a\nb\nc"), ev("d"), ev("e")]


def test_a_cr_ending_a_chunk_and_an_lf_starting_the_next_are_one_line_end() -> None:
    # Counted as two, the LF would be a blank line dispatching "a" on its own.
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [ev("a\nb")]
    assert parse(b"data: a\r", b"\n", b"\r", b"\n") == [ev("a")]


def test_a_cr_ending_an_event_dispatches_at_once() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: now\r\r") == [ev("now")]  # no waiting for a possible LF
    assert parser.feed(b"\ndata: x\n\n") == [ev("x")]  # that LF ended the blank CR line


def test_other_unicode_line_breaks_are_data() -> None:
    assert parse("data: a\x0bb\x0cc\u2028d\x85e\n\n".encode()) == [ev("a\x0bb\x0cc\u2028d\x85e")]


def test_bom_dropped_once_at_the_start_even_when_split() -> None:
    assert parse(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [ev("x")]
    # A second BOM is a character: the field is named "\ufeffdata", which nothing knows.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []
    assert parse(b"data: \xef\xbb\xbfx\n\n") == [ev("\ufeffx")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: \xffa\xc3\n\n") == [ev("\ufffda\ufffd")]
    assert parse(b"data: \xe2\x82", b"\xac\n\n") == [ev("\u20ac")]  # split inside a character


def test_comments_and_unknown_fields_are_ignored() -> None:
    stream = b": heartbeat\n:\nfoo: bar\nDATA: upper\ndata : spaced name\ndata: kept\n\n"
    assert parse(stream) == [ev("kept")]


def test_a_field_without_colon_has_an_empty_value() -> None:
    assert parse(b"data\ndata\n\n") == [ev("\n")]
    assert parse(b"event\ndata: x\n\n") == [ev("x")]  # empty event type: "message"


def test_only_one_space_after_the_colon_is_removed() -> None:
    assert parse(b"data:  two\n\ndata:\tTab\n\ndata:a: b\n\n") == [
        ev(" two"),
        ev("\tTab"),
        ev("a: b"),
    ]


def test_event_type_applies_to_one_event() -> None:
    assert parse(b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\n\ndata: 3\n\n") == [
        ev("1", "a"),
        ev("2"),
        ev("3"),  # the type of a block without data is dropped with it
    ]


def test_no_data_no_event() -> None:
    assert parse(b"event: x\nid: 7\nretry: 10\n\n\n\n") == []


def test_id_is_kept_across_events_and_a_nul_id_is_ignored() -> None:
    parser = SSEParser()
    events = parser.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x003\ndata: c\n\nid\ndata: d\n\n")
    assert [e.id for e in events] == ["1", "1", "1", None]
    assert parser.last_event_id == ""


def test_the_last_event_id_is_set_at_the_blank_line_even_without_an_event() -> None:
    parser = SSEParser()
    parser.feed(b"id: 5\n")
    assert parser.last_event_id == ""  # not yet: the block is not finished
    parser.feed(b"\n")
    assert parser.last_event_id == "5"
    assert parser.feed(b"data: x\n\n") == [ev("x", id="5")]


def test_retry_only_ascii_digits() -> None:
    parser = SSEParser()
    for value in (b"1.5", b"-1", b"10ms", b"\xd9\xa1", b"", b" 20", b"1e3"):
        parser.feed(b"retry: " + value + b"\n")
    assert parser.retry is None
    parser.feed(b"retry: 0025\n")
    assert parser.retry == 25  # at once, not at the end of the event


def test_retry_shown_on_the_next_event_only() -> None:
    events = parse(b"retry: 3000\n\ndata: a\n\ndata: b\nretry: 7\n\ndata: c\n\n")
    assert [e.retry for e in events] == [3000, 7, None]


def test_restart_discards_the_unfinished_and_keeps_id_and_retry() -> None:
    parser = SSEParser()
    assert parser.feed(b"id: 4\ndata: a\n\nretry: 50\nid: 9\ndata: lost\ndata: part") == [
        ev("a", id="4")
    ]
    parser.restart()
    assert (parser.last_event_id, parser.retry) == ("4", 50)
    # The new stream starts afresh: a BOM is dropped again, an LF after the old stream's CR is
    # a line end of its own, and an event without an id keeps the ID it reconnected with.
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\n") == [ev("b", id="4", retry=50)]


def test_restart_after_a_trailing_cr() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    parser.restart()
    assert parser.feed(b"\ndata: b\n\n") == [ev("b")]


def test_seeded_last_event_id() -> None:
    assert parse(b"data: x\n\n", last_event_id="41") == [ev("x", id="41")]
    with pytest.raises(ValueError, match="last_event_id"):
        SSEParser("a\nb")


# -- properties ---------------------------------------------------------------------------------


def literal_reading(stream: bytes) -> tuple[list[SSEEvent], str, int | None]:
    """The standard read literally, one character at a time, over the whole stream at once:
    an oracle written independently of the parser (no regex, no incremental decoding)."""
    text = stream.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    line: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\r":
            lines.append("".join(line))
            line = []
            if i + 1 < len(text) and text[i + 1] == "\n":
                i += 1
        elif char == "\n":
            lines.append("".join(line))
            line = []
        else:
            line.append(char)
        i += 1
    events: list[SSEEvent] = []
    data_buffer, event_type, id_buffer, last_id = "", "", "", ""
    retry: int | None = None
    shown_retry: int | None = None
    for current in lines:  # the unfinished last line is never processed
        if current == "":
            last_id = id_buffer
            if data_buffer == "":
                event_type = ""
                continue
            if data_buffer.endswith("\n"):
                data_buffer = data_buffer[:-1]
            events.append(
                SSEEvent(
                    event=event_type or "message",
                    data=data_buffer,
                    id=last_id or None,
                    retry=shown_retry,
                )
            )
            data_buffer, event_type, shown_retry = "", "", None
            continue
        if current.startswith(":"):
            continue
        if ":" in current:
            field = current[: current.index(":")]
            value = current[current.index(":") + 1 :]
            if value.startswith(" "):
                value = value[1:]
        else:
            field, value = current, ""
        if field == "event":
            event_type = value
        elif field == "data":
            data_buffer += value + "\n"
        elif field == "id":
            if "\x00" not in value:
                id_buffer = value
        elif field == "retry":
            if value != "" and all(c in "0123456789" for c in value):
                retry = shown_retry = int(value)
    return events, last_id, retry


_NAMES = st.sampled_from(["data", "event", "id", "retry", "", "dat", "Data", "ïd", "data "])
_VALUES = st.one_of(
    st.text(
        alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
        max_size=12,
    ),
    st.sampled_from(["", " ", "  x", "12", "0", "9" * 20, "1 2", "a\x00b", "٣", "€ 𝄞"]),
)
_LINE_ENDS = st.sampled_from(["\n", "\r", "\r\n"])


@st.composite
def event_streams(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    if draw(st.booleans()):
        parts.append(b"\xef\xbb\xbf")
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            line = ":" + draw(_VALUES)  # a comment
        elif kind == 1:
            line = ""  # a blank line
        elif kind == 2:
            line = draw(_NAMES)  # a field without colon
        else:
            line = draw(_NAMES) + ":" + draw(_VALUES)
        parts.append(line.encode() + draw(_LINE_ENDS).encode())
        if draw(st.integers(0, 15)) == 0:
            parts.append(draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xef\xbb\xbf"])))
    return b"".join(parts)


@st.composite
def splits(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(stream)), max_size=12))))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_split_gives_the_events_of_the_literal_reading(data: st.DataObject) -> None:
    stream = data.draw(event_streams())
    chunks = data.draw(splits(stream))
    parser = SSEParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    expected, last_id, retry = literal_reading(stream)
    assert events == expected
    assert parser.feed(b"") == []
    assert (parser.last_event_id, parser.retry) == (last_id, retry)


@settings(max_examples=200, deadline=None)
@given(stream=st.binary(max_size=200), data=st.data())
def test_any_bytes_any_split(stream: bytes, data: st.DataObject) -> None:
    chunks = data.draw(splits(stream))
    whole = SSEParser().feed(stream)
    parser = SSEParser()
    assert [event for chunk in chunks for event in parser.feed(chunk)] == whole
    assert whole == literal_reading(stream)[0]
