"""Files with one job each: no file in trio_retry/, tests/ or benchmarks/ over 600 lines, no class
over 450 (GUIDE.md's standards; STYLE: "a class past ~400 lines is two classes").

Any over the bar would be named in :data:`FILES_OVER` and :data:`CLASSES_OVER` (none today),
each an open item for the work that changes it. Nothing else may cross the bar, and a name in
either list must still exist, so a rename cannot carry an exemption away.

Docs that grow by accretion have a cap too: docs/benchmarks.md shows today's figures, its history
lives in the CHANGELOG and docs/results/ (its "Adding a scenario" says how), and it stays under
:data:`DOC_LIMITS`'s lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ("trio_retry", "tests", "benchmarks")
FILE_LIMIT = 600
CLASS_LIMIT = 450

#: Docs with a line cap: below it, or the page has become a diary again.
DOC_LIMITS = {"docs/benchmarks.md": 800}

#: Over the bar today (lines then); each to be split by the work that owns it.
FILES_OVER: dict[str, int] = {}
CLASSES_OVER: dict[str, int] = {}


def sources() -> Iterator[Path]:
    for tree in TREES:
        yield from sorted((ROOT / tree).rglob("*.py"))


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def classes(path: Path) -> Iterator[tuple[str, int]]:
    """Each class of ``path`` (nested ones too) with its length in lines."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            yield node.name, node.end_lineno - node.lineno + 1


def over(limit: int, sizes: dict[str, int], exempt: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in sizes.items() if size > limit and name not in exempt}


def test_no_file_is_over_600_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): lines(path) for path in sources()}
    assert over(FILE_LIMIT, sizes, FILES_OVER) == {}


def test_no_class_is_over_450_lines() -> None:
    sizes = {
        f"{path.relative_to(ROOT)}::{name}": size
        for path in sources()
        for name, size in classes(path)
    }
    assert over(CLASS_LIMIT, sizes, CLASSES_OVER) == {}


@pytest.mark.parametrize("doc", sorted(DOC_LIMITS))
def test_a_capped_doc_stays_under_its_cap(doc: str) -> None:
    assert lines(ROOT / doc) < DOC_LIMITS[doc], f"{doc}: move history to docs/results/"


@pytest.mark.parametrize("name", [*FILES_OVER, *CLASSES_OVER])
def test_each_exemption_names_what_exists(name: str) -> None:
    path, _, cls = name.partition("::")
    assert (ROOT / path).is_file(), name
    if cls:
        assert cls in dict(classes(ROOT / path)), name


def test_the_checks_see_a_long_file_and_a_long_class(tmp_path: Path) -> None:
    source = tmp_path / "long.py"
    source.write_text("class Long:\n" + "    x = 1\n" * 500 + "y = 2\n" * 200)
    assert lines(source) == 701
    assert dict(classes(source)) == {"Long": 501}
    assert over(FILE_LIMIT, {"long.py": 701}, {}) == {"long.py": 701}
    assert over(CLASS_LIMIT, {"long.py::Long": 501}, {"long.py::Long": 501}) == {}
