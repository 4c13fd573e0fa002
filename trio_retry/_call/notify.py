"""Telling of each attempt, as it is recorded: its telemetry span ends, the DEBUG log line,
and ``on_attempt`` (SPEC §3). One place for the retry loop and a hedged round alike: an
attempt is told of once, when its record joins the call's trail.

Only the trail is told: no header value, so no credential, ever reaches the log.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable

from .._core.attempt import Attempt
from .prepare import PreparedRequest
from .runtime import Runtime

__all__ = ["logger", "notify", "told", "watched"]

logger = logging.getLogger("trio_retry")


async def told(
    rt: Runtime, request: PreparedRequest, attempts: list[Attempt], attempt: Attempt
) -> None:
    """Append ``attempt`` to the call's trail and tell of it (:func:`notify`)."""
    attempts.append(attempt)
    if (pending := notify(rt, attempt, request)) is not None:
        await pending


def watched(rt: Runtime, request: PreparedRequest) -> bool:
    """Whether :func:`notify` has anyone to tell of an attempt: a span, the DEBUG log or
    ``on_attempt``."""
    return (
        request.trace is not None
        or rt.config.on_attempt is not None
        or logger.isEnabledFor(logging.DEBUG)
    )


def notify(rt: Runtime, attempt: Attempt, request: PreparedRequest) -> Awaitable[object] | None:
    """Log the attempt (DEBUG) and call ``on_attempt``; its awaitable, if it returned one,
    is for the caller to await (so that a client without an async callback awaits nothing).
    With ``telemetry=``, the attempt's span ends here, with the attempt's record.
    """
    trace = request.trace
    if trace is not None and trace.current is not None:
        trace.current.finish(attempt)
    if logger.isEnabledFor(logging.DEBUG):
        # The attempt trail only: no header values, so no credentials, ever reach the log.
        logger.debug(
            "%s %s attempt %d: %s %s %s%s (%.1f ms)%s",
            request.method,
            format(request.url),  # shown: no userinfo, no query value (str() has them)
            attempt.number,
            attempt.stage,
            attempt.evidence,
            attempt.status if attempt.status is not None else "-",
            f" {attempt.category}" if attempt.category is not None else "",
            attempt.timings.get("total", 0.0) * 1000,
            f"; {attempt.decision}" if attempt.decision is not None else "",
        )
    on_attempt = rt.config.on_attempt
    if on_attempt is not None:
        result = on_attempt(attempt)
        if inspect.isawaitable(result):
            return result
    return None
