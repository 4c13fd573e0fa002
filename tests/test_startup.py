"""Start-up stays lean: what ``import trio_retry`` must not import, and when it does.

Each check runs a fresh interpreter (this process has imported everything long ago) and reads
its ``sys.modules``. Modules that ``import trio`` loads by itself are left out of every
assertion: trio_retry cannot avoid them. Timings are measured by ``benchmarks/startup.py``,
never asserted here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import trio_retry
from trio_retry.testing import FaultServer, Respond

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60

#: Imported only when a program needs them (see each import's comment in the package).
LAZY = (
    "h11",  # the HTTP/1.1 connection: on the first HTTP/1.1 connection
    "trio_retry._wire.http11",
    "h2",
    "hpack",
    "hyperframe",
    "trio_retry._wire.http2",  # the HTTP/2 package: on the first HTTP/2 connection
    "trio_retry._wire.http3",  # HTTP/3 and QUIC: http3=True, an Upstream(http3=True)
    "aioquic",
    "qh3",
    "pylsqpack",
    "trio_retry._state",  # state=: the file of what earlier processes learned
    "http.cookiejar",  # Client(cookies=...)
    "trio_retry._cookies",
    "urllib.request",  # the environment's proxies
    "email",  # (email.utils) a Last-Modified date judged for resumption, without an ETag
    "json",  # Response.json(), a json= body
    "datetime",  # Response.elapsed
    "trio_retry._call.sse",  # client.sse(): the event streams
    "trio_retry._sse",
    "brotli",  # the first br / zstd body
    "brotlicffi",
    "backports.zstd",
    "compression.zstd",
    "trio_retry._proxy",  # proxy= or trust_env=True
    "trio_retry._wire.socks",  # a socks5:// proxy
    "socksio",
    "trio_retry._wire.dialer",  # transport=
    "opentelemetry",  # telemetry=
    "trio_retry._core.hedging",  # Upstream(hedging=...), hedging=
    "trio_retry._core.breaker",
    "trio_retry._core.throttle",
    "netrc",  # a netrc file that exists
    "encodings.idna",  # the codec, and stringprep: a host name that is not ASCII
    "stringprep",
    "calendar",  # a Retry-After date
    "difflib",  # the unknown-option error
    "uuid",  # idempotency_key=True, multipart
    "trio_retry._cli",  # the command line, its parser and the demo
    "trio_retry._cli.args",
    "trio_retry._demo",
    "argparse",
    "importlib.metadata",
)


#: The retry loop, a request's preparation and what only they import: on entering the first
#: client (``async with``), so neither by ``from trio_retry import Client`` nor by ``Client()``.
CALL_LOOP = (
    "trio_retry._call.loop",
    "trio_retry._call.answer",
    "trio_retry._call.attempt",
    "trio_retry._call.resume",
    "trio_retry._call.hedge",
    "trio_retry._resume",
    "trio_retry._call.prepare",  # bodies, redirects, credentials, idempotency keys
    "trio_retry._call.body",
    "trio_retry._body",
    "trio_retry._redirects",
    "trio_retry._auth",  # (by Client() already when given auth=)
    "trio_retry._call.resilience",  # breakers, throttles, hedging
)

#: What building the first client imports (its checks), not ``from trio_retry import Client``:
#: the retry engine (its default is built by ``Client()``) and the observers (hooks, telemetry).
ON_CLIENT = (
    "trio_retry._core.engine",
    "trio_retry._core.replay",
    "trio_retry._core.reconcile",
    "trio_retry._observe",
)


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(code: str) -> dict[str, list[str]]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        env=_env(),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])
    return result


_SNAPSHOT = """
import json, sys
def loaded():
    return sorted(sys.modules)
"""


def _loaded(names: list[str], *prefixes: str) -> list[str]:
    """Those of ``names`` that are one of ``prefixes`` or a submodule of one."""
    return [n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)]


@pytest.fixture(scope="module")
def trio_alone() -> set[str]:
    """What ``import trio`` loads by itself."""
    return set(_run(_SNAPSHOT + "import trio\nprint(json.dumps({'m': loaded()}))")["m"])


def _unexpected(names: list[str], trio_alone: set[str], *prefixes: str) -> list[str]:
    return [n for n in _loaded(names, *prefixes) if n not in trio_alone]


def test_import_imports_nothing_and_the_client_leaves_the_lazy_modules_alone(
    trio_alone: set[str],
) -> None:
    names = _run(_SNAPSHOT + "import trio_retry\nprint(json.dumps({'m': loaded()}))")["m"]
    assert _loaded(names, "trio_retry") == ["trio_retry"]  # each name on its first access
    assert "trio" not in names
    code = (
        "from trio_retry import Client, RetryPolicy\n"
        "names = loaded()\n"
        "Client()\n"
        "print(json.dumps({'m': names, 'built': loaded()}))"
    )
    result = _run(_SNAPSHOT + code)
    names = result["m"]
    assert "trio_retry._client" in names  # the client itself is imported, as before
    assert _unexpected(names, trio_alone, *LAZY) == []
    assert _loaded(names, *CALL_LOOP, *ON_CLIENT) == []
    # Building a client imports what its checks need, and still none of a call's path.
    assert {"trio_retry._core.engine", "trio_retry._observe.otel"} <= set(result["built"])
    assert _loaded(result["built"], *CALL_LOOP) == []


def test_lazy_public_names_resolve_to_the_real_ones() -> None:
    # In this process: every name in __all__ is an attribute, listed by dir(), and the deferred
    # ones are the classes their modules define (not copies).
    for name in trio_retry.__all__:
        assert getattr(trio_retry, name) is not None, name
        assert name in dir(trio_retry), name
    from trio_retry._core.breaker import CircuitBreaker, CircuitState
    from trio_retry._core.hedging import Hedging
    from trio_retry._core.throttle import AdaptiveThrottle

    assert trio_retry.Hedging is Hedging
    assert trio_retry.AdaptiveThrottle is AdaptiveThrottle
    assert trio_retry.CircuitBreaker is CircuitBreaker
    assert trio_retry.CircuitState is CircuitState
    with pytest.raises(AttributeError, match="no attribute 'Hedgeing'"):
        trio_retry.Hedgeing  # noqa: B018


def test_lazy_public_names_import_in_a_fresh_interpreter(trio_alone: set[str]) -> None:
    code = _SNAPSHOT + (
        "import trio_retry\n"
        "before = loaded()\n"
        "from trio_retry import Hedging, CircuitBreaker, CircuitState, AdaptiveThrottle\n"
        "ns = {}\n"
        "exec('from trio_retry import *', ns)\n"
        "missing = [n for n in trio_retry.__all__ if n not in ns]\n"
        "trio_retry.Upstream(hedging=Hedging(delay=0.1), breaker=CircuitBreaker(),"
        " throttle=AdaptiveThrottle())\n"
        "try:\n"
        "    trio_retry.Upstream(breaker=Hedging(delay=0.1))\n"
        "    refused = ['']\n"
        "except TypeError as exc:\n"
        "    refused = [str(exc)]\n"
        "print(json.dumps({'before': before, 'after': loaded(), 'missing': missing,"
        " 'refused': refused}))"
    )
    result = _run(code)
    assert result["missing"] == []
    assert result["refused"][0].startswith("Upstream.breaker must be a CircuitBreaker or None")
    assert _unexpected(result["before"], trio_alone, "trio_retry._core.hedging") == []
    assert _loaded(result["after"], "trio_retry._core.hedging", "trio_retry._core.breaker") == [
        "trio_retry._core.breaker",
        "trio_retry._core.hedging",
    ]


_CLIENT = """
import trio, trio_retry
async def main(url):
    async with trio_retry.Client() as client:
        h1 = await client.get(url)
    plain = loaded()
    async with trio_retry.Client(http2_prior_knowledge=True, cookies=True) as client:
        h2 = await client.get(url)
    print(json.dumps({'plain': plain, 'after': loaded(),
                      'versions': [h1.http_version, h2.http_version]}))
trio.run(main, sys.argv[1])
"""


async def test_http2_and_cookies_load_when_used(trio_alone: set[str]) -> None:
    """A plain HTTP/1.1 call loads h11 and none of the other lazy modules; the first HTTP/2
    connection loads the HTTP/2 package, a client with cookies the cookie jar, and both work."""
    server = FaultServer()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        server.default = Respond(200, body=b"ok", headers=[("Set-Cookie", "a=1")])
        with trio.fail_after(LIMIT):
            done = await trio.run_process(
                [sys.executable, "-c", _SNAPSHOT + _CLIENT, server.url + "/"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=_env(),
                cwd=ROOT,
            )
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout.decode().splitlines()[-1])
    assert result["versions"] == ["HTTP/1.1", "HTTP/2"]
    # The HTTP/1.1 call loaded its own machinery, and nothing else of the list.
    http11 = ("h11", "trio_retry._wire.http11")
    others = [name for name in LAZY if name not in http11]
    assert _unexpected(result["plain"], trio_alone, *others) == []
    used = _loaded(result["after"], "h2", "trio_retry._wire.http2", "http.cookiejar")
    assert {"h2", "trio_retry._wire.http2", "http.cookiejar"} <= set(used)
    assert {"h11", "trio_retry._wire.http11"} <= set(result["plain"])
    assert set(CALL_LOOP) <= set(result["plain"])
    assert set(ON_CLIENT) <= set(result["plain"])


def _imported_by(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``argv`` with ``-X importtime``; the modules it imported, from that report."""
    env = _env()
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", done.stderr, re.MULTILINE)
    return done, names


@pytest.mark.parametrize("entry", ["python -m trio_retry", "trio-retry"])
def test_help_answers_without_the_client_machinery(entry: str, trio_alone: set[str]) -> None:
    if entry == "trio-retry":
        script = Path(sys.executable).with_name("trio-retry")
        if not script.exists():
            pytest.skip(f"no trio-retry console script next to {sys.executable}")
        argv = [str(script), "--help"]
    else:
        argv = [sys.executable, "-m", "trio_retry", "--help"]
    done, names = _imported_by(argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: ")
    assert "send a GET request" in done.stdout
    assert "trio_retry._cli.args" in names  # the report is read (the parser is imported)
    never = [n for n in LAZY if not n.startswith(("trio_retry._cli", "argparse"))]
    assert _unexpected(names, trio_alone, *never) == []
    # Nor the client, nor trio itself: help is the parser's alone.
    assert _loaded(names, "trio", "trio_retry._client", "trio_retry._cli.main") == []
