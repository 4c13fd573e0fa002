"""Imports go one way: core < values < wire < call < client < CLI/demo; no circles.

Every import in the package counts, including those under ``if TYPE_CHECKING:`` and inside
functions: a circle that only a type checker sees is still a circle in the design. The layers:

- ``_core``: the pure decision core (``tests/core/test_purity.py`` keeps trio out of it);
- values: URLs, headers, responses, errors, bodies and the small pure helpers around them;
- ``_wire``: Trio I/O around h11/h2;
- ``_call``: one call (prepare, loop, attempt, body, connect, failures), and ``_observe``
  (event hooks, OpenTelemetry) which the call uses and which uses nothing of it;
- ``_client``: the facade;
- the package itself, the CLI and the demo.

``trio_retry.testing`` is a public tool of its own: it may use the core, the values and the
wire, never the client's internals (``_call``, ``_client``).

Inside the wire, no protocol imports another (:data:`PROTOCOLS`): HTTP/1.1, HTTP/2 and HTTP/3
share what they share through ``_wire/exchange.py`` and ``_wire/contract.py`` (STYLE habit 19).
A package whose map says its imports go one way down the list is held to its order.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import trio_retry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trio_retry"
BENCHMARKS = ROOT / "benchmarks"

VALUES = ("_models", "_url", "_errors", "_body", "_decoding", "_auth", "_cookies", "_proxy",
          "_redirects", "_trail", "_tls", "_streams", "_rechunk", "_response_body",
          "_response_views", "_sse", "_state", "_resume", "_reconcile")  # fmt: skip
TOP = ("__init__", "__main__", "_cli", "_demo", "instrumentation")
#: The wire's protocols, each the modules that are its own (a package, or module names).
PROTOCOLS = {
    "HTTP/1.1": ("_wire.http11", "_wire.http11_reader", "_wire.http11_rules", "_wire.fast11"),
    "HTTP/2": ("_wire.http2",),
    "HTTP/3": ("_wire.http3",),
}


def protocol(module: str) -> str | None:
    """The protocol ``module`` belongs to (:data:`PROTOCOLS`), or ``None``."""
    for name, prefixes in PROTOCOLS.items():
        for prefix in prefixes:
            full = f"trio_retry.{prefix}"
            if module == full or module.startswith(full + "."):
                return name
    return None


def layer(module: str) -> int:
    """The rank of a module of the package (``trio_retry.x.y``); lower ranks are lower."""
    parts = module.split(".")[1:]
    head = parts[0] if parts else "__init__"
    if head == "_core":
        return 0
    if head in VALUES:
        return 1
    if head == "_wire":
        return 2
    if head in ("_call", "_observe"):
        return 3
    if head == "_client":
        return 4
    if head == "testing":
        return 5
    if head in TOP:
        return 6
    raise AssertionError(f"{module}: no layer; add it to tests/test_layers.py")


def allowed(importer: str, imported: str) -> bool:
    """Whether ``importer`` may import ``imported`` (both modules of the package)."""
    mine, theirs = protocol(importer), protocol(imported)
    if mine is not None and theirs is not None and mine != theirs:
        return False  # no protocol imports another
    if imported.split(".")[:2] == importer.split(".")[:2]:
        return True  # inside one subpackage: the circle check below still applies
    mine, theirs = layer(importer), layer(imported)
    if importer == "trio_retry.testing.pytest_plugin" and imported == "trio_retry":
        return True  # its fixtures bind the public Client, as a user's own fixtures would
    if mine == 5:  # testing: never the client's internals
        return theirs <= 2 or theirs == 5
    if theirs == 5:
        return mine == 6  # the demo runs a FaultServer
    return theirs <= mine


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> Iterator[str]:
    """Every module of ``path``'s own top package (``trio_retry`` or ``benchmarks``) that it
    imports, wherever the import statement is."""
    name = module_name(path)
    top = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            elif node.module and node.module.split(".")[0] == top:
                target = node.module
            else:
                continue
            yield target
            for alias in node.names:  # ``from . import x`` imports the submodule x
                candidate = f"{target}.{alias.name}"
                if _exists(candidate):
                    yield candidate


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Who imports whom inside ``package`` (the product, or ``benchmarks``)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        name = module_name(path)
        edges[name] = {m for m in imports_of(path) if m != name and _exists(m)}
    return edges


def violations(edges: dict[str, set[str]]) -> list[str]:
    return [
        f"{importer} imports {imported}"
        for importer, targets in sorted(edges.items())
        for imported in sorted(targets)
        if not allowed(importer, imported)
    ]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    for name in graph():
        layer(name)


def test_no_module_imports_against_the_layers() -> None:
    assert violations(graph()) == []


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_no_import_circles_in_the_benchmarks() -> None:
    """``benchmarks/`` too: the scenarios know the clients and the load generators, never the
    other way round (a type-only import counts, as in the package)."""
    edges = graph(BENCHMARKS)
    assert "benchmarks.loadgen" in edges["benchmarks.clients"]  # the graph sees the package
    assert cycles(edges) == []


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("trio_retry._core.engine", "trio_retry._wire.pool"),  # core above wire
        ("trio_retry._models", "trio_retry._call.loop"),
        ("trio_retry._wire.pool", "trio_retry._client"),
        ("trio_retry._call.loop", "trio_retry._client"),
        ("trio_retry._client", "trio_retry._cli"),
        ("trio_retry.testing._server", "trio_retry._call.attempt"),
        ("trio_retry.testing._server", "trio_retry._client"),
        ("trio_retry._wire.http3.connection", "trio_retry._wire.http2.headers"),
        ("trio_retry._wire.http3", "trio_retry._wire.http2"),
        ("trio_retry._wire.http2.session", "trio_retry._wire.http3.driver"),
        ("trio_retry._wire.http2.connection", "trio_retry._wire.http11"),
        ("trio_retry._wire.fast11", "trio_retry._wire.http2.frames"),
    ],
)
def test_the_checker_catches_an_import_against_the_layers(importer: str, imported: str) -> None:
    assert violations({importer: {imported}}) == [f"{importer} imports {imported}"]


def test_the_checker_catches_a_circle() -> None:
    edges: dict[str, Iterable[str]] = {
        "trio_retry._core.evidence": {"trio_retry._core.engine"},
        "trio_retry._core.engine": {"trio_retry._core.evidence"},
    }
    assert cycles({k: set(v) for k, v in edges.items()}) == [
        ["trio_retry._core.engine", "trio_retry._core.evidence"]
    ]


def imports_from_tests(source: str, filename: str = "<source>") -> list[str]:
    """The modules of ``tests`` that ``source`` imports, wherever the import statement is."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "tests"]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == "tests":
                found.append(node.module)
    return found


def test_benchmarks_import_nothing_from_tests() -> None:
    # Tests may import benchmarks (the soak's oracle, the adapters), never the other way:
    # ``python -m benchmarks.soak`` must not depend on the test suite's layout.
    benchmarks = BENCHMARKS
    found = {
        str(path.relative_to(benchmarks)): imports_from_tests(path.read_text(), str(path))
        for path in sorted(benchmarks.rglob("*.py"))
    }
    assert {name: modules for name, modules in found.items() if modules} == {}


def test_the_checker_catches_an_import_from_tests() -> None:
    source = "def f():\n    from tests.reliability.invariants import check_call\n"
    assert imports_from_tests(source) == ["tests.reliability.invariants"]


def test_the_wire_protocols_exist() -> None:
    """Each module :data:`PROTOCOLS` names is one of the package's (a rename would silently
    take a protocol out of the rule)."""
    edges = graph()
    for prefixes in PROTOCOLS.values():
        for prefix in prefixes:
            assert f"trio_retry.{prefix}" in edges, prefix


def map_of(package: str) -> list[str]:
    """The modules the map in ``package``'s ``__init__`` docstring names, in its order."""
    root = Path(trio_retry.__file__).parent / package
    doc = ast.get_docstring(ast.parse((root / "__init__.py").read_text(encoding="utf-8"))) or ""
    named = re.findall(r"``(\w+)(?:\.py|/)``|:mod:`\.(\w+)`", doc)
    return list(dict.fromkeys(a or b for a, b in named))


@pytest.mark.parametrize(
    "package", ["_core", "_wire", "_call", "_wire/http2", "_wire/http3", "testing"]
)
def test_each_package_map_names_every_module(package: str) -> None:
    """The module map in a package's ``__init__`` docstring names each of its modules (and
    nothing that does not exist), so a newcomer can find the one file that owns a behaviour."""
    root = Path(trio_retry.__file__).parent / package
    modules = {p.stem for p in root.glob("*.py") if p.name != "__init__.py"} | {
        p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    names = set(map_of(package))
    assert modules - names == set(), f"{package}: modules missing from the map"
    assert names - modules == set(), f"{package}: the map names modules that do not exist"


def against_the_map(order: list[str], package: str, edges: dict[str, set[str]]) -> list[str]:
    """The imports inside ``package`` (dotted) that go up its map's ``order``."""
    rank = {name: i for i, name in enumerate(order)}
    found = []
    for name in order:
        importer = f"{package}.{name}"
        for imported in sorted(edges.get(importer, ())):
            other = imported.removeprefix(package + ".").split(".")[0]
            if imported.startswith(package + ".") and rank.get(other, -1) >= rank[name]:
                found.append(f"{importer} imports {imported}")
    return found


@pytest.mark.parametrize("package", ["_core", "_wire/http2", "_wire/http3", "testing"])
def test_imports_go_down_the_map(package: str) -> None:
    """Where a map says "imports go one way, down this list", they do: a module imports only
    modules named above it."""
    dotted = "trio_retry." + package.replace("/", ".")
    doc = ast.get_docstring(
        ast.parse((Path(trio_retry.__file__).parent / package / "__init__.py").read_text())
    )
    assert doc is not None
    assert "down this list" in " ".join(doc.split())
    assert against_the_map(map_of(package), dotted, graph()) == []


def test_the_map_order_check_catches_an_import_up_the_list() -> None:
    edges = {"p.low": {"p.high"}, "p.high": {"p.low"}}
    assert against_the_map(["low", "high"], "p", edges) == ["p.low imports p.high"]
