"""trio_retry: a Trio-native HTTP client that knows whether the server did it.

Public names only; see SPEC and docs/reference.md.

Every public name is imported on its first access, by ``__getattr__`` below, from the module
that defines it: ``import trio_retry`` itself imports nothing (not even trio), so that
``python -m trio_retry --help`` and ``trio-retry --help`` answer without the HTTP machinery,
and a program pays for what it names. ``from trio_retry import Client`` and
``trio_retry.Client`` work as for any module attribute (the first access stores the name in
this module, so later ones are plain lookups), ``dir()`` and ``__all__`` list every name, and
type checkers see the ``TYPE_CHECKING`` imports. tests/test_startup.py keeps what each entry
point imports (h2, cookies, the CLI's client machinery behind --help) lazy.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from ._auth import AuthRequest as AuthRequest
    from ._auth import BasicAuth as BasicAuth
    from ._auth import BearerAuth as BearerAuth
    from ._auth import DigestAuth as DigestAuth
    from ._auth import RequestAuth as RequestAuth
    from ._call.resilience import UpstreamStatus as UpstreamStatus
    from ._call.sse import EventStream as EventStream
    from ._client import Client as Client
    from ._client import RefreshableAuth as RefreshableAuth
    from ._core.attempt import Attempt as Attempt
    from ._core.backoff import Backoff as Backoff
    from ._core.backoff import parse_retry_after as parse_retry_after
    from ._core.breaker import CircuitBreaker as CircuitBreaker
    from ._core.breaker import CircuitState as CircuitState
    from ._core.budget import RetryBudget as RetryBudget
    from ._core.engine import AmbiguousFailure as AmbiguousFailure
    from ._core.engine import Decision as Decision
    from ._core.engine import DefaultRetryEligibilityEngine as DefaultRetryEligibilityEngine
    from ._core.engine import DenyReason as DenyReason
    from ._core.engine import RetryAllowed as RetryAllowed
    from ._core.engine import RetryContext as RetryContext
    from ._core.engine import RetryDenied as RetryDenied
    from ._core.engine import RetryEligibilityEngine as RetryEligibilityEngine
    from ._core.evidence import Evidence as Evidence
    from ._core.evidence import FailureCategory as FailureCategory
    from ._core.evidence import Stage as Stage
    from ._core.hedging import Hedging as Hedging
    from ._core.idempotency import Idempotency as Idempotency
    from ._core.policy import RetryPolicy as RetryPolicy
    from ._core.policy import Upstream as Upstream
    from ._core.replay import Multipart as Multipart
    from ._core.replay import Reopenable as Reopenable
    from ._core.replay import Replayability as Replayability
    from ._core.replay import StreamFactory as StreamFactory
    from ._core.throttle import AdaptiveThrottle as AdaptiveThrottle
    from ._errors import AdmissionRejected as AdmissionRejected
    from ._errors import ClientStateError as ClientStateError
    from ._errors import ConnectFailed as ConnectFailed
    from ._errors import ConnectionBroken as ConnectionBroken
    from ._errors import DeadlineExceeded as DeadlineExceeded
    from ._errors import ExecutedWithoutResponse as ExecutedWithoutResponse
    from ._errors import HttpAmbiguousExecutionError as HttpAmbiguousExecutionError
    from ._errors import HTTPStatusError as HTTPStatusError
    from ._errors import InvalidRequest as InvalidRequest
    from ._errors import MissingExtra as MissingExtra
    from ._errors import PoolTimeout as PoolTimeout
    from ._errors import ProtocolFailed as ProtocolFailed
    from ._errors import RejectReason as RejectReason
    from ._errors import RequestFailed as RequestFailed
    from ._errors import ResponseNotJSON as ResponseNotJSON
    from ._errors import StreamClosed as StreamClosed
    from ._errors import TLSFailed as TLSFailed
    from ._errors import TooManyRedirects as TooManyRedirects
    from ._errors import TrioRetryError as TrioRetryError
    from ._models import URL as URL
    from ._models import Headers as Headers
    from ._models import Response as Response
    from ._models import SentRequest as SentRequest
    from ._models import StageTimeouts as StageTimeouts
    from ._observe.hooks import EventHooks as EventHooks
    from ._observe.hooks import HookRequest as HookRequest
    from ._observe.hooks import HookResponse as HookResponse
    from ._observe.otel import OpenTelemetry as OpenTelemetry
    from ._reconcile import AmbiguityReport as AmbiguityReport
    from ._reconcile import Reconciled as Reconciled
    from ._reconcile import ReconcileOutcome as ReconcileOutcome
    from ._sse import SSEEvent as SSEEvent
    from ._state.file import StateFileWarning as StateFileWarning
    from ._tls import InsecureTLSWarning as InsecureTLSWarning

__version__ = "0.1.0"

#: Every public name: name -> the module that defines it (imported on first access).
_LAZY = {
    "AdaptiveThrottle": "._core.throttle",
    "AdmissionRejected": "._errors",
    "AmbiguityReport": "._reconcile",
    "AmbiguousFailure": "._core.engine",
    "Attempt": "._core.attempt",
    "AuthRequest": "._auth",
    "Backoff": "._core.backoff",
    "BasicAuth": "._auth",
    "BearerAuth": "._auth",
    "CircuitBreaker": "._core.breaker",
    "CircuitState": "._core.breaker",
    "Client": "._client",
    "ClientStateError": "._errors",
    "ConnectFailed": "._errors",
    "ConnectionBroken": "._errors",
    "DeadlineExceeded": "._errors",
    "ExecutedWithoutResponse": "._errors",
    "Decision": "._core.engine",
    "DefaultRetryEligibilityEngine": "._core.engine",
    "DenyReason": "._core.engine",
    "DigestAuth": "._auth",
    "EventHooks": "._observe.hooks",
    "Evidence": "._core.evidence",
    "FailureCategory": "._core.evidence",
    "HTTPStatusError": "._errors",
    "Headers": "._models",
    "Hedging": "._core.hedging",
    "HookRequest": "._observe.hooks",
    "HookResponse": "._observe.hooks",
    "HttpAmbiguousExecutionError": "._errors",
    "Idempotency": "._core.idempotency",
    "InsecureTLSWarning": "._tls",
    "StateFileWarning": "._state.file",
    "InvalidRequest": "._errors",
    "MissingExtra": "._errors",
    "Multipart": "._core.replay",
    "OpenTelemetry": "._observe.otel",
    "PoolTimeout": "._errors",
    "ProtocolFailed": "._errors",
    "RefreshableAuth": "._client",
    "RejectReason": "._errors",
    "Reconciled": "._reconcile",
    "ReconcileOutcome": "._reconcile",
    "Reopenable": "._core.replay",
    "Replayability": "._core.replay",
    "RequestAuth": "._auth",
    "RequestFailed": "._errors",
    "Response": "._models",
    "ResponseNotJSON": "._errors",
    "EventStream": "._call.sse",
    "RetryAllowed": "._core.engine",
    "RetryBudget": "._core.budget",
    "RetryContext": "._core.engine",
    "RetryDenied": "._core.engine",
    "RetryEligibilityEngine": "._core.engine",
    "RetryPolicy": "._core.policy",
    "SentRequest": "._models",
    "SSEEvent": "._sse",
    "Stage": "._core.evidence",
    "StageTimeouts": "._models",
    "StreamClosed": "._errors",
    "StreamFactory": "._core.replay",
    "TLSFailed": "._errors",
    "TooManyRedirects": "._errors",
    "TrioRetryError": "._errors",
    "URL": "._models",
    "Upstream": "._core.policy",
    "UpstreamStatus": "._call.resilience",
    "parse_retry_after": "._core.backoff",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AdaptiveThrottle",
    "AdmissionRejected",
    "AmbiguityReport",
    "AmbiguousFailure",
    "AuthRequest",
    "Attempt",
    "Backoff",
    "BasicAuth",
    "BearerAuth",
    "CircuitBreaker",
    "CircuitState",
    "Client",
    "ClientStateError",
    "ResponseNotJSON",
    "ConnectFailed",
    "ConnectionBroken",
    "DeadlineExceeded",
    "Decision",
    "ExecutedWithoutResponse",
    "DefaultRetryEligibilityEngine",
    "DenyReason",
    "DigestAuth",
    "EventHooks",
    "EventStream",
    "Evidence",
    "FailureCategory",
    "Headers",
    "Hedging",
    "HTTPStatusError",
    "HookRequest",
    "HookResponse",
    "HttpAmbiguousExecutionError",
    "Idempotency",
    "InsecureTLSWarning",
    "MissingExtra",
    "InvalidRequest",
    "Multipart",
    "OpenTelemetry",
    "PoolTimeout",
    "ProtocolFailed",
    "RefreshableAuth",
    "RejectReason",
    "Reconciled",
    "ReconcileOutcome",
    "Reopenable",
    "RequestAuth",
    "Replayability",
    "RequestFailed",
    "Response",
    "RetryAllowed",
    "RetryBudget",
    "RetryContext",
    "RetryDenied",
    "RetryEligibilityEngine",
    "RetryPolicy",
    "SentRequest",
    "SSEEvent",
    "StateFileWarning",
    "Stage",
    "StageTimeouts",
    "StreamClosed",
    "StreamFactory",
    "TLSFailed",
    "TooManyRedirects",
    "TrioRetryError",
    "URL",
    "Upstream",
    "UpstreamStatus",
    "parse_retry_after",
]
