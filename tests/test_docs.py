"""Run every Python sample in README.md and docs/*.md, so the docs cannot rot.

A fenced ```python block whose nearest non-blank preceding line is ``<!-- no-run -->`` is
skipped. A block that defines a ``test_`` function (sync or async) is written to a file and run
with pytest in a subprocess; any other block is run as a script. Each must succeed within 60 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NO_RUN = "<!-- no-run -->"
TIMEOUT = 60
_TEST_FUNCTION = re.compile(r"^\s*(async\s+)?def\s+test_", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    path: Path
    index: int  # among the file's python blocks
    line: int  # 1-based line of the opening fence
    code: str
    skip: bool

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}[{self.index}]"

    @property
    def is_test(self) -> bool:
        return bool(_TEST_FUNCTION.search(self.code))


def _doc_files() -> list[Path]:
    files = [ROOT / "README.md"] if (ROOT / "README.md").is_file() else []
    return files + sorted((ROOT / "docs").glob("*.md"))


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            end = start + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            previous = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
            blocks.append(
                Block(
                    path=path,
                    index=len(blocks),
                    line=start + 1,
                    code="\n".join(lines[start + 1 : end]) + "\n",
                    skip=previous == NO_RUN,
                )
            )
            i = end
        i += 1
    return blocks


ALL_BLOCKS = [block for path in _doc_files() for block in python_blocks(path)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Import the package from this checkout even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_doc_sample_runs(block: Block, tmp_path: Path) -> None:
    if block.skip:
        pytest.skip(f"marked {NO_RUN}")
    name = f"test_doc_sample_{block.index}.py" if block.is_test else f"doc_sample_{block.index}.py"
    script = tmp_path / name
    script.write_text(block.code, encoding="utf-8")
    if block.is_test:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    else:
        command = [sys.executable, str(script)]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, (
        f"{block.id} (line {block.line} of {block.path.name}) failed:\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def test_docs_have_runnable_samples() -> None:
    testing_doc = [b for b in ALL_BLOCKS if b.path.name == "testing.md" and not b.skip]
    assert any(b.is_test for b in testing_doc)
    assert any(not b.is_test for b in testing_doc)


def test_block_parser(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n```python\nprint(1)\n```\n\n<!-- no-run -->\n\n```python\nboom\n```\n"
        "```py\nnot python\n```\n```python\nasync def test_x(): pass\n```\n",
        encoding="utf-8",
    )
    blocks = python_blocks(doc)
    assert [(b.line, b.skip, b.is_test) for b in blocks] == [
        (2, False, False),
        (8, True, False),
        (14, False, True),
    ]
    assert blocks[0].code == "print(1)\n"
