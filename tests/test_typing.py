"""The public signatures stay typed: user code is checked by mypy --strict and pyright strict.

``tests/typing/good.py`` must pass both checkers; in ``tests/typing/mistakes.py`` every line
marked ``# error: <option>`` must be reported by both, and no other line. The test fails when a
public signature loses its types (``**options: Any`` would let every mistake through) or when a
correct call stops type-checking.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "typing"
GOOD, MISTAKES = FOLDER / "good.py", FOLDER / "mistakes.py"
TIMEOUT = 600  # both checkers take seconds; this only stops a hang
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def expected_lines(path: Path) -> set[int]:
    return {
        number
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"# error: \w+$", line)
    }


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def mypy_errors(path: Path) -> set[int]:
    proc = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)])
    where = re.escape(str(path.relative_to(ROOT)))
    lines = {int(m.group(1)) for m in re.finditer(rf"^{where}:(\d+): error:", proc.stdout, re.M)}
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return lines


def pyright_errors(path: Path) -> set[int]:
    pyright = shutil.which("pyright", path=str(BIN)) or shutil.which("pyright")
    if pyright is None:
        pytest.fail(
            "pyright is not installed: it is part of the test extra (pip install -e '.[test]')"
        )
    proc = run([pyright, "--outputjson", "--pythonpath", sys.executable, str(path)])
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    return {
        diagnostic["range"]["start"]["line"] + 1
        for diagnostic in report["generalDiagnostics"]
        if diagnostic["severity"] == "error"
    }


@pytest.mark.parametrize("checker", [mypy_errors, pyright_errors], ids=["mypy", "pyright"])
def test_correct_user_code_type_checks(checker: object) -> None:
    assert callable(checker)
    assert checker(GOOD) == set()


@pytest.mark.parametrize("checker", [mypy_errors, pyright_errors], ids=["mypy", "pyright"])
def test_every_listed_mistake_is_reported_and_nothing_else(checker: object) -> None:
    assert callable(checker)
    expected = expected_lines(MISTAKES)
    assert len(expected) >= 17
    assert checker(MISTAKES) == expected
