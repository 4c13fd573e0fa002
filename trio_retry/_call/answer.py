"""The end of one request's loop: the caller's answer, from the result of the attempt the
loop stopped on.

- an attempt answered below 400 (or above, when the engine denied a retry) becomes the
  :class:`~trio_retry.Response` (:func:`response_of`): buffered, or streamed with the
  :data:`Closer` that ends its body (:func:`deliver`);
- anything else becomes the exception its decision means (:func:`finish`, with the public
  types of :mod:`.failures`): ``HttpAmbiguousExecutionError`` when the request may have run,
  else the ``RequestFailed`` subclass of the last attempt's category.

Nothing here decides whether to send again (the engine's file does, ``_core/engine.py``) and
nothing writes into the attempt's result: a streamed body ends through the runner the result
holds (``AttemptResult.held``).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._core.attempt import Attempt
from .._core.decision import AmbiguousFailure, Decision
from .._errors import HttpAmbiguousExecutionError
from .._models import Response
from .body import CheckedDecoder, StreamedBody
from .failures import ambiguous_status, failure, key_reused
from .prepare import PreparedRequest
from .result import AttemptResult
from .resume import Retrier, carry
from .runtime import Runtime
from .upstream import UpstreamState

__all__ = ["Closer", "buffered", "counted", "deliver", "finish", "response_of"]

#: Ends a streamed response (``StreamedBody.close``): gives its connection back (reusable if
#: the body was read to the end) and its permit; reading on after it raises ``StreamClosed``
#: with the message given (what closed it). ``None`` for a buffered response, which holds
#: nothing.
Closer = Callable[[str], None]


def counted(request: PreparedRequest, error: Exception) -> Exception:
    """``error``, counted in the ambiguous-outcomes metric when it is that (``telemetry=``)."""
    if request.trace is not None and isinstance(error, HttpAmbiguousExecutionError):
        request.trace.ended_ambiguous()
    return error


def response_of(
    request: PreparedRequest,
    result: AttemptResult,
    attempts: list[Attempt] | None,
    decision: Decision | None,
    ended: float | None = None,
    attempt_record: Callable[[], Attempt] | None = None,
    stream: StreamedBody | None = None,
    decoder: CheckedDecoder | None = None,
) -> Response:
    """The call's response; ``ended``: when its attempt ended, if just read (else now);
    ``attempts=None``: its one attempt is ``attempt_record()``'s, built when first read."""
    wire = result.response
    assert wire is not None
    response = Response._received(  # (positional: see its docstring)
        wire.status,
        wire.reason,
        wire.headers,  # decoded on first use, like the sent ones
        wire.http_version,
        request.url,
        request.method,
        result.sent_headers or (),
        (trio.current_time() if ended is None else ended) - request.started,  # elapsed
        result.body,  # content
        attempts,  # the call's own list: the loop is done with it
        decision,
        stream,
        decoder,
        attempt_record,
    )
    if result.raw_length is not None:
        response._downloaded = result.raw_length
    return response


def finish(
    request: PreparedRequest,
    result: AttemptResult,
    attempts: list[Attempt],
    decision: Decision,
) -> tuple[Response, Closer | None]:
    """The loop stopped on ``decision``: the final response, or the exception it means."""
    if result.response is not None and result.error is None:
        response = response_of(request, result, attempts, decision)
        if isinstance(decision, AmbiguousFailure):
            raise counted(request, ambiguous_status(request, response, attempts, decision))
        if response.status == 422 and request.idempotency_key is not None:
            raise key_reused(request, response)
        return response, None
    assert result.error is not None
    raise counted(request, failure(request, attempts, result.error, decision))


def deliver(
    rt: Runtime,
    request: PreparedRequest,
    result: AttemptResult,
    attempts: list[Attempt],
    state: UpstreamState,
    retrier: Callable[[], Retrier],
) -> tuple[Response, Closer | None]:
    """The response of a successful streamed attempt, with its body still to be read, and the
    :data:`Closer` that ends it. A body that can be continued is continued when it breaks
    (``_call/resume.py``)."""
    body, carried, decoder = carry(rt, request, state, result, attempts, retrier)
    response = response_of(request, result, attempts, None, stream=body, decoder=decoder)
    response._continuation = carried
    return response, body.close


async def buffered(
    rt: Runtime,
    request: PreparedRequest,
    result: AttemptResult,
    attempts: list[Attempt],
    state: UpstreamState,
    retrier: Callable[[], Retrier],
) -> Response:
    """The response of a buffered call whose body can be continued (``AttemptRun`` left it
    unread for that): read whole here, continued as a streamed one would be, or restarted
    when the server sent another representation (nothing of it reached the caller)."""
    _, carried, _ = carry(rt, request, state, result, attempts, retrier)
    head, raw_length = await carried.read_buffered()
    response = response_of(request, head._replace(raw_length=raw_length), attempts, None)
    response._continuation = carried
    return response
