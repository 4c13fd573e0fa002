"""h2's private names in one module (``_wire/http2/h2_private.py``), behind its probe.

The probe run at import finds every name on the h2 installed; a name missing (simulated by
listing one no h2 has, as a release that renamed one would look) turns the fast path off,
says so once in the log, and HTTP/2 calls go on through plain h2 (FaultServer, h2c and TLS;
nginx in ``tests/interop/test_nginx_h2_private.py``). No other module of the package names one
of h2's private names (the AST of every module, read here).
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
import trio

import trio_retry
from trio_retry._wire.http2 import h2_private
from trio_retry._wire.http2.fast import FastMachine
from trio_retry.testing import FaultServer

from ..support.h2_fast_path import fast_path_off as fast_path_off

PACKAGE = Path(trio_retry.__file__).parent
PRIVATE = {name for _, name in h2_private.NAMES}
#: Our own attributes that share a name with one of h2's (``self._data`` and the like).
OWN_OBJECTS = {"self", "cls"}


def test_the_installed_h2_has_every_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trio_retry"):
        assert h2_private.probe() is True
    assert h2_private.usable()
    assert caplog.records == []


def test_a_missing_name_turns_the_fast_path_off_and_says_so_once(
    fast_path_off: list[FastMachine], caplog: pytest.LogCaptureFixture
) -> None:
    assert not h2_private.usable()
    [record] = caplog.get_records("setup")
    assert record.name == "trio_retry"
    assert "connection._renamed_in_a_later_h2" in record.getMessage()
    assert "fast path is off" in record.getMessage()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
async def test_calls_go_through_plain_h2_when_a_name_is_missing(
    fast_path_off: list[FastMachine],
    caplog: pytest.LogCaptureFixture,
    nursery: trio.Nursery,
    tls: bool,
) -> None:
    [said] = caplog.get_records("setup")  # the probe's warning, as the fixture probed
    assert "fast path is off" in said.getMessage()
    server = FaultServer(tls=tls)
    await nursery.start(server.serve)
    options = (
        {"ssl_context": server.client_ssl_context()} if tls else {"http2_prior_knowledge": True}
    )
    async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
        with trio.fail_after(10):
            async with trio.open_nursery() as calls:
                for _ in range(8):
                    calls.start_soon(client.get, server.url + "/r")
            response = await client.get(server.url + "/r")
        assert (response.status, response.content, response.http_version) == (
            200,
            b"ok",
            "HTTP/2",
        )
        assert fast_path_off, "no HTTP/2 connection was made"
        assert not any(machine.fast or machine.handed_over for machine in fast_path_off)
    assert server.executed_count("GET", "/r") == 9
    assert caplog.records == []  # said once, by the probe: no connection says it again


def _own(owner: ast.expr) -> bool:
    """``self.x``, ``cls.x`` or ``super().x``: an attribute of our own object (or of the
    class it extends, as ``http3/shims.py`` extends aioquic's)."""
    if isinstance(owner, ast.Name):
        return owner.id in OWN_OBJECTS
    return (
        isinstance(owner, ast.Call)
        and isinstance(owner.func, ast.Name)
        and owner.func.id == "super"
    )


def _names_outside(path: Path) -> list[str]:
    """Where ``path`` names one of h2's private names: an attribute of an object not our
    own, a name imported from h2, a key or ``getattr``/``setattr`` name given as a string."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE and not _own(node.value):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("h2"):
            found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name[0] == "_"]
        elif isinstance(node, ast.Subscript | ast.Call):
            strings = [node.slice] if isinstance(node, ast.Subscript) else node.args[1:2]
            found += [
                f"{path.name}:{node.lineno} {key.value!r}"
                for key in strings
                if isinstance(key, ast.Constant) and key.value in PRIVATE
            ]
    return found


def test_no_other_module_names_a_private_name_of_h2() -> None:
    outside = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "h2_private.py"
        for hit in _names_outside(path)
    ]
    assert outside == []


def test_the_scan_finds_a_private_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from h2.connection import _decode_headers\n"
        "def f(machine, stream):\n"
        "    machine.incoming_buffer._data = b''\n"
        "    stream.__dict__['_track_content_length'] = None\n"
        "    setattr(stream, '_authority', b'x')\n"
        "    __slots__ = ('_data',)\n"
        "    return self._data, super()._decode_headers()\n"
    )
    assert _names_outside(module) == [
        "m.py:1 _decode_headers",
        "m.py:3 ._data",
        "m.py:4 '_track_content_length'",
        "m.py:5 '_authority'",
    ]
