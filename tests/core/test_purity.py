"""The decision core stays pure: no I/O or clock modules may be imported by _core/."""

from __future__ import annotations

import ast
import pathlib

import trio_retry

CORE = pathlib.Path(trio_retry.__file__).parent / "_core"
FORBIDDEN = {"trio", "h11", "h2", "socket", "ssl", "time", "asyncio", "outcome", "select"}


def _imported_roots(path: pathlib.Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_no_io_or_clock() -> None:
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 7
    offenders = {
        f.name: sorted(_imported_roots(f) & FORBIDDEN)
        for f in files
        if _imported_roots(f) & FORBIDDEN
    }
    assert offenders == {}


def test_the_checker_would_catch_an_import(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom trio import sleep\n")
    assert _imported_roots(bad) & FORBIDDEN == {"time", "trio"}


def test_public_names_importable() -> None:
    names = [
        "Evidence", "Stage", "Attempt", "FailureCategory", "Idempotency", "Replayability",
        "Reopenable", "StreamFactory", "Multipart", "RetryContext", "RetryAllowed",
        "RetryDenied", "AmbiguousFailure", "DenyReason", "RetryEligibilityEngine",
        "DefaultRetryEligibilityEngine", "RetryPolicy", "Backoff", "RetryBudget", "Upstream",
        "TrioRetryError", "RequestFailed", "HttpAmbiguousExecutionError", "ConnectFailed",
        "TLSFailed", "PoolTimeout", "DeadlineExceeded", "ProtocolFailed", "ConnectionBroken",
        "InvalidRequest",
    ]  # fmt: skip
    missing = [n for n in names if not hasattr(trio_retry, n)]
    assert missing == []
    assert not issubclass(trio_retry.HttpAmbiguousExecutionError, trio_retry.RequestFailed)
    for sub in ("ConnectFailed", "TLSFailed", "PoolTimeout", "DeadlineExceeded",
                "ProtocolFailed", "ConnectionBroken", "InvalidRequest"):  # fmt: skip
        assert issubclass(getattr(trio_retry, sub), trio_retry.RequestFailed)
    assert trio_retry.Stage.CONNECT < trio_retry.Stage.TLS
    assert trio_retry.FailureCategory.TLS_CERTIFICATE.permanent
    assert not trio_retry.FailureCategory.CONNECT.permanent
