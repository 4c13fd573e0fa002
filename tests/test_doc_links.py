"""Every relative link in the docs leads somewhere: README.md, CHANGELOG.md and docs/ (results
included) link only to files that exist and to headings those files have, so moving a section or
renaming a result cannot leave a dead link behind. docs/results/ names its files by date and
what they measure, never by issue.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    return [f for f in files if f.is_file()] + sorted((ROOT / "docs").rglob("*.md"))


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(text):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            name, n = base, 0
            while name in found:  # a repeated heading gets -1, -2...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(path: Path) -> list[str]:
    text = path.read_text("utf-8")
    return [m.group(1) for line in prose_lines(text) for m in _LINK.finditer(line)]


def broken(path: Path) -> list[str]:
    """The relative links of ``path`` whose file or heading does not exist."""
    bad = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text("utf-8")):
            bad.append(target)
    return bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken(path) == []


def test_results_are_named_by_what_they_measure() -> None:
    names = [p.name for p in (ROOT / "docs" / "results").iterdir()]
    assert [n for n in names if re.search(r"issue|round", n, re.IGNORECASE)] == []
    dated = [n for n in names if n != "README.md"]
    assert all(re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9]", n) for n in dated), dated


def test_the_checker_sees_a_dead_file_and_a_dead_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## The runner: `python -m x`\n## Twice\n## Twice\n")
    doc = tmp_path / "a.md"
    doc.write_text(
        "[ok](b.md#the-runner-python--m-x) [ok](b.md#twice-1) [ok](#here) [web](https://x.org/y)\n"
        "## Here\n```\n[in code](gone.md)\n```\n"
        "[gone](gone.md) [no anchor](b.md#nowhere) ![img](missing.svg)\n"
    )
    assert broken(doc) == ["gone.md", "b.md#nowhere", "missing.svg"]
