"""What users install: the sdist and the wheel built from it, installed into a clean venv.

``python -m build`` makes the sdist, then the wheel from the unpacked sdist (so a file the sdist
forgets is missing from the wheel too). The wheel must carry every subpackage, ``py.typed``, the
licence, the pytest plugin's entry point and the metadata; installed into a fresh virtual
environment (its dependencies from PyPI or pip's cache), it must run the demo from a directory
outside the checkout, so the checkout's own ``trio_retry`` cannot be the one imported.
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import pytest

import trio_retry

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 600  # a build and an install take seconds; this only stops a hang
VERSION = trio_retry.__version__

pytestmark = pytest.mark.slow


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (path,) = dist.glob("*.whl")
    assert path.name == f"trio_retry-{VERSION}-py3-none-any.whl"
    return path


def packages_in_checkout() -> set[str]:
    return {
        init.parent.relative_to(ROOT).as_posix()
        for init in (ROOT / "trio_retry").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def test_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    info = f"trio_retry-{VERSION}.dist-info"
    packages = packages_in_checkout()
    assert {"trio_retry", "trio_retry/testing", "trio_retry/_wire/http2"} <= packages
    for package in packages:
        assert f"{package}/__init__.py" in names, package
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "trio_retry").rglob("*.py")}
    assert sources <= names
    assert "trio_retry/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/"))]

    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "[pytest11]\ntrio_retry = trio_retry.testing.pytest_plugin" in entry_points
    assert "[console_scripts]\ntrio-retry = trio_retry.__main__:main" in entry_points


def wheel_metadata(wheel: Path) -> Message:
    raw = zipfile.ZipFile(wheel).read(f"trio_retry-{VERSION}.dist-info/METADATA")
    return email.message_from_bytes(raw)


def test_wheel_metadata(wheel: Path) -> None:
    meta = wheel_metadata(wheel)
    assert meta["Name"] == "trio_retry"
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.10"
    classifiers = set(meta.get_all("Classifier") or [])
    for expected in (
        "Framework :: Trio",
        "Intended Audience :: Developers",
        "Operating System :: OS Independent",
        "Topic :: Internet :: WWW/HTTP",
        "Typing :: Typed",
        *(f"Programming Language :: Python :: 3.{minor}" for minor in range(10, 14)),
    ):
        assert expected in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    runtime = {
        req.split(";")[0].split(">")[0].split("<")[0].strip()
        for req in meta.get_all("Requires-Dist") or []
        if "extra ==" not in req
    }
    assert {"trio", "h11", "h2", "outcome"} <= runtime


def test_sdist_contents(dist: Path) -> None:
    (path,) = dist.glob("*.tar.gz")
    top = f"trio_retry-{VERSION}"
    names = set(tarfile.open(path).getnames())
    for name in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "trio_retry/py.typed"):
        assert f"{top}/{name}" in names


def test_wheel_installs_and_runs_the_demo(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = run([str(python), "-c", "import trio_retry; print(trio_retry.__file__)"], cwd=outside)
    installed = Path(where.stdout.strip()).resolve()
    assert installed.is_relative_to(venv.resolve())
    assert not installed.is_relative_to(ROOT)

    demo = run([str(python), "-m", "trio_retry", "demo", "--quick"], cwd=outside)
    assert "reached the upstream" in demo.stdout
    version = run([str(bindir / "trio-retry"), "--version"], cwd=outside)
    assert f"trio_retry {VERSION}" in version.stdout
    run([str(python), "-c", "import trio_retry.testing"], cwd=outside)
