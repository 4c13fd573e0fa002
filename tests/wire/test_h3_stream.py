"""An HTTP/3 request stream's waits kept on the client's timekeeper (``_wire/http3/stream.py``):
a lane that runs out fails the stream (``stage_expired``), unless what the wait was for
arrived first, as a cancel scope's expiry would have let it. (The whole path, a head waited
for past ``first_byte`` over HTTP/3: ``tests/call/test_head_deadline.py``.)"""

from __future__ import annotations

import trio

from trio_retry._core.evidence import Evidence, FailureCategory, Stage
from trio_retry._wire.exchange import WireResponse
from trio_retry._wire.http3.stream import H3Stream
from trio_retry._wire.progress import AttemptProgress


class Owner:
    """The connection as a stream sees it: no timekeeper, counts ignored."""

    timekeeper = None

    def received(self, size: int) -> None:
        pass

    def consumed(self, size: int) -> None:
        pass

    def answered(self) -> None:
        pass

    def finish_stream(self, stream: H3Stream, *, reset: bool) -> None:
        pass


def _stream() -> tuple[H3Stream, AttemptProgress]:
    progress = AttemptProgress(trio.current_time())
    progress.advance(Stage.AWAITING_RESPONSE)
    return H3Stream(Owner(), 0, progress), progress


async def test_a_first_byte_lane_that_runs_out_fails_the_stream_as_a_timeout() -> None:
    stream, progress = _stream()
    stream.stage_expired("first_byte", progress)
    assert stream.failed
    error = stream.error(progress)
    assert (error.category, error.evidence) == (FailureCategory.TIMEOUT, Evidence.SENT_NO_RESPONSE)
    assert "first_byte" in str(error)


async def test_a_head_that_arrived_first_wins_over_the_first_byte_lane() -> None:
    stream, progress = _stream()
    stream.head(WireResponse(200, "", [], "HTTP/3", stream), False)
    stream.stage_expired("first_byte", progress)
    assert not stream.failed


async def test_a_chunk_or_the_end_that_arrived_first_wins_over_the_read_lane() -> None:
    stream, progress = _stream()
    stream.head(WireResponse(200, "", [], "HTTP/3", stream), False)
    stream.data(b"chunk", False)
    stream.stage_expired("read", progress)
    assert not stream.failed
    assert await stream.receive_body(progress) == b"chunk"
    stream.data(b"", True)
    stream.stage_expired("read", progress)
    assert not stream.failed
    assert await stream.receive_body(progress) == b""


async def test_a_read_lane_that_runs_out_with_nothing_there_fails_the_stream() -> None:
    stream, progress = _stream()
    stream.head(WireResponse(200, "", [], "HTTP/3", stream), False)
    progress.advance(Stage.RESPONSE_BODY)
    stream.stage_expired("read", progress)
    error = stream.error(progress)
    assert (error.category, error.evidence) == (FailureCategory.TIMEOUT, Evidence.PARTIAL_RESPONSE)
    assert "read" in str(error)
