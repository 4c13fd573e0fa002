"""The pytest plugin: registered by the entry point, inert unless used, and its fixtures.

Each scenario is a small test file run by pytest in a subprocess, in a directory of its own
(no pyproject: the plugin comes only from the installed entry point), so what is checked is
what a user of the package gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(source), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_entry_point_names_the_plugin() -> None:
    found = [ep for ep in entry_points(group="pytest11") if ep.name == "trio_retry"]
    assert [ep.value for ep in found] == ["trio_retry.testing.pytest_plugin"]


def test_the_plugin_is_inert_until_a_fixture_is_used(tmp_path: Path) -> None:
    result = _pytest(
        tmp_path,
        """
        import sys

        def test_plain():
            assert "trio_retry.testing.pytest_plugin" in sys.modules  # loaded...
            assert "trustme" not in sys.modules  # ...and nothing more
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    listing = _pytest(tmp_path, "def test_x(): pass\n", "--fixtures")
    for name in ("fault_server", "tls_fault_server", "mock_transport", "mock_client"):
        assert name in listing.stdout


def test_every_fixture_works(tmp_path: Path) -> None:
    result = _pytest(
        tmp_path,
        """
        import pytest
        import trio_retry
        from trio_retry.testing import CloseAfterBody, RefuseStream, Respond

        pytestmark = pytest.mark.trio

        async def test_h1(fault_server, fault_client):
            user = lambda r: Respond(200, body=r.params["id"].encode())  # noqa: E731
            fault_server.route("GET", "/users/{id}", user)
            response = await fault_client.get("/users/7")
            assert (response.text, response.http_version) == ("7", "HTTP/1.1")

        async def test_h2c(fault_server, h2c_fault_client):
            fault_server.script(RefuseStream())
            response = await h2c_fault_client.post("/pay", content=b"x")
            assert response.http_version == "HTTP/2"
            assert response.attempts[0].evidence is trio_retry.Evidence.NOT_SENT

        async def test_tls(tls_fault_server, tls_fault_client):
            response = await tls_fault_client.get("/")
            assert tls_fault_server.url.startswith("https://")
            assert response.http_version == "HTTP/2"

        async def test_mock(mock_transport, mock_client):
            mock_transport.server.script(CloseAfterBody())
            with pytest.raises(trio_retry.HttpAmbiguousExecutionError):
                await mock_client.post("/pay", content=b"x")
            assert mock_transport.server.executed_count("POST", "/pay") == 1
            assert mock_transport.connects[0].host == "testserver"
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout


def test_options_fixtures_and_strict_mode(tmp_path: Path) -> None:
    result = _pytest(
        tmp_path,
        """
        import pytest
        import trio_retry
        from trio_retry.testing import Respond

        pytestmark = pytest.mark.trio

        @pytest.fixture
        def fault_server_options():
            return {"strict": True}

        @pytest.fixture
        def trio_retry_client_options():
            return {"retry": trio_retry.RetryPolicy(max_attempts=1)}

        async def test_mock_leaves_an_action(mock_transport, mock_client):
            mock_transport.server.route("GET", "/never", Respond(500))
            assert mock_client.config.retry.max_attempts == 1

        async def test_server_leaves_an_action(fault_server, fault_client):
            fault_server.route("GET", "/unused", Respond(500))

        async def test_all_used(fault_server, fault_client):
            fault_server.route("GET", "/used", Respond(201))
            assert (await fault_client.get("/used")).status == 201
        """,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "2 failed, 1 passed" in result.stdout, output  # pytest-trio: teardown fails the test
    assert "GET /never: Respond(status=500" in output
    assert "GET /unused: Respond(status=500" in output
    assert "UnusedScriptError" in output
    # One clear error per test: no Cancelled chained to it, and only pytest-trio's own
    # nursery group around it (issue #32: it was three nested groups and the cancellation).
    assert "Cancelled" not in output, output
    assert output.count("Exception Group Traceback") == 2, output  # one per failed test
    assert output.count("ExceptionGroup: Exceptions from Trio nursery (1 sub-exception)") == 2
