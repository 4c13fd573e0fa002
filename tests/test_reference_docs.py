"""Docs that cannot go stale: docs/reference.md, guide.md and httpx.md checked against the code.

The truth comes from the code (``__all__``, ``inspect.signature``, the ``RequestOptions``
TypedDict); the docs are parsed with regexes:

- reference.md documents a public name with a heading code span (``### `Name` ``), a bold code
  span (``**`Name`**``) or a ``class Name``/``def name`` line in a code block;
- the ``class Client:`` code block shows ``__init__`` one parameter a line, the verbs one
  ``def`` each, and ``class RequestOptions(TypedDict, ...)`` one key a line;
- an options table is a Markdown table whose header starts with ``| option``, one code span
  naming the option in its first column;
- httpx.md's mapping table names trio_retry options as ``name=`` inside code spans;
- the ``class Response:`` block shows each method's parameters, and the ``| option`` table
  after it names every one of them but ``self`` and ``**kwargs``.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

import trio_retry
import trio_retry.instrumentation
import trio_retry.testing
from trio_retry import Client

DOCS = Path(__file__).resolve().parent.parent / "docs"
VERBS = ("request", "stream", "get", "head", "options", "post", "put", "patch", "delete")

_FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SIGNATURES = re.compile(r"^<!-- no-run -->\n```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_TREE = re.compile(r"^```text\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ANY_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_NAME = r"[A-Za-z_][A-Za-z_0-9]*"


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """The text under each ``## `` heading (the part before the first one under ``""``)."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    sections = {"": parts[0]}
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[title.strip()] = body
    return sections


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return _ANY_FENCE.sub("", text)


def _compare(what: str, documented: Iterable[str], actual: Iterable[str]) -> None:
    documented, actual = set(documented), set(actual)
    missing = sorted(actual - documented)
    extra = sorted(documented - actual)
    assert not missing, f"{what}: in the code but not documented: {missing}"
    assert not extra, f"{what}: documented but not in the code: {extra}"


# -- (a) public names ---------------------------------------------------------------------------


def _documented_names(text: str) -> set[str]:
    """Names that ``text`` documents: heading or bold code spans, ``class``/``def`` lines of a
    signature block (a ``<!-- no-run -->`` one: runnable examples define their own names), the
    entries of an exception tree (a ``text`` block drawn with ``├──``)."""
    prose = _prose(text)
    names: set[str] = set()
    for heading in re.findall(r"^#{2,4} (.*)$", prose, flags=re.MULTILINE):
        names.update(re.findall(rf"`({_NAME})`", heading))
    names.update(re.findall(rf"\*\*`({_NAME})", prose))
    for code in _SIGNATURES.findall(text):
        names.update(re.findall(rf"^(?:class|def) ({_NAME})", code, flags=re.MULTILINE))
    for tree in _TREE.findall(text):
        names.update(re.findall(rf"[├└]── ({_NAME})", tree))
    return names


def _reference_parts() -> tuple[str, str]:
    """reference.md split into the ``trio_retry`` part and the ``trio_retry.testing`` part
    (the ``trio_retry.instrumentation`` part left out: :func:`test_instrumentation_section`)."""
    sections = _sections(_read("reference.md"))
    testing = sections.pop("trio_retry.testing")
    sections.pop("trio_retry.instrumentation")
    sections.pop("Completeness", None)  # its own check, run by tests/test_docs.py
    return "".join(sections.values()), testing


def test_instrumentation_section() -> None:
    section = _sections(_read("reference.md"))["trio_retry.instrumentation"]
    _compare(
        "reference.md trio_retry.instrumentation",
        _documented_names(section),
        trio_retry.instrumentation.__all__,
    )


def test_every_public_name_is_documented() -> None:
    main, testing = _reference_parts()
    missing = sorted(set(trio_retry.__all__) - _documented_names(main))
    assert not missing, f"public names of trio_retry not documented in reference.md: {missing}"
    # trio_retry.testing's bullets name the actions in code spans: `Respond(status=200, ...)`.
    spans = {m.group(1) for m in re.finditer(rf"`({_NAME})(?:`|\()", _prose(testing))}
    documented = _documented_names(testing) | spans
    missing = sorted(set(trio_retry.testing.__all__) - documented)
    assert not missing, f"public names of trio_retry.testing not in reference.md: {missing}"


def test_every_documented_name_exists() -> None:
    main, testing = _reference_parts()
    # The index at the top lists each group's names in code spans, a bullet a group.
    index = _sections(_read("reference.md"))[""].split("\n- [", 1)[1]
    claimed = set(re.findall(rf"`({_NAME})`", index)) | _documented_names(main)
    claimed -= _UNEXPORTED
    extra = sorted(claimed - set(trio_retry.__all__))
    assert not extra, f"reference.md documents names trio_retry does not export: {extra}"
    claimed = _documented_names(testing)
    extra = sorted(claimed - set(trio_retry.testing.__all__))
    assert not extra, f"reference.md documents names trio_retry.testing lacks: {extra}"


# Shown in the Client block so the options have a type; reachable, not in ``__all__``.
_UNEXPORTED = {"RequestOptions"}


# -- (b) Client.__init__ and the verbs ----------------------------------------------------------


def _client_block() -> str:
    blocks: list[str] = [
        code for code in _FENCE.findall(_read("reference.md")) if "class Client:" in code
    ]
    assert len(blocks) == 1, "reference.md has one code block with `class Client:`"
    return blocks[0]


def _split_params(params: str) -> list[str]:
    """Split a parameter list on its top-level commas."""
    parts: list[str] = []
    depth, current = 0, ""
    for char in params:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def _documented_params(block: str, function: str) -> list[str]:
    """The parameters of ``def function(...)`` in ``block``: ``name`` / ``*name`` / ``**name``."""
    match = re.search(rf"def {function}\((.*?)\)\s*->", block, flags=re.DOTALL)
    assert match, f"reference.md shows no `def {function}(...)` in the Client block"
    params = [re.sub(r"#.*", "", line) for line in match.group(1).splitlines()]
    names = [re.split(r"[:=]", part)[0].strip() for part in _split_params("\n".join(params))]
    return [name for name in names if name not in ("*", "/")]


def _real_params(function: Callable[..., Any]) -> list[str]:
    prefix: dict[inspect._ParameterKind, str] = {
        inspect.Parameter.VAR_POSITIONAL: "*",
        inspect.Parameter.VAR_KEYWORD: "**",
    }
    return [
        prefix.get(param.kind, "") + name
        for name, param in inspect.signature(function).parameters.items()
    ]


def _request_options() -> type:
    """The TypedDict the verbs' ``**options`` is annotated with, from the Client's module."""
    annotation = inspect.signature(Client.get).parameters["options"].annotation
    match = re.fullmatch(rf"Unpack\[({_NAME})\]", str(annotation))
    assert match, f"Client.get's **options is not Unpack[TypedDict]: {annotation!r}"
    typed_dict: type = getattr(sys.modules[Client.__module__], match.group(1))
    return typed_dict


def _option_keys(typed_dict: type) -> set[str]:
    keys: frozenset[str] = typed_dict.__required_keys__ | typed_dict.__optional_keys__  # type: ignore[attr-defined]
    return set(keys)


def test_client_signature_matches_init() -> None:
    documented = _documented_params(_client_block(), "__init__")
    real = _real_params(Client.__init__)
    _compare("reference.md Client.__init__", documented, real)
    assert documented == real, "reference.md lists Client's options in another order"


def test_client_signature_defaults() -> None:
    """Literal defaults shown (``= 100``) and ``DEFAULT_STAGE_TIMEOUTS`` are the real ones."""
    block = _client_block()
    real = inspect.signature(Client.__init__).parameters
    for name, default in re.findall(rf"^\s+({_NAME}):[^=\n]*= (.+?),?$", block, re.MULTILINE):
        if name not in real or default.strip() == "DEFAULT_STAGE_TIMEOUTS":
            continue
        try:
            ast.literal_eval(default)
        except (ValueError, SyntaxError):
            continue  # not a literal: described, not compared
        # Compared as text: a default may be a sentinel that prints as the value (http2).
        shown, actual = default.strip(), repr(real[name].default)
        assert shown == actual, f"reference.md: Client({name}={shown}), the code: {actual}"
    stage = re.search(r"^DEFAULT_STAGE_TIMEOUTS = (.+)$", block, flags=re.MULTILINE)
    assert stage, "reference.md defines DEFAULT_STAGE_TIMEOUTS"
    shown = eval(stage.group(1), {"StageTimeouts": trio_retry.StageTimeouts})
    actual = real["stage_timeouts"].default
    assert shown == actual, f"reference.md: DEFAULT_STAGE_TIMEOUTS = {shown}, the code: {actual}"


def test_client_options_table_matches_init() -> None:
    client = _sections(_read("reference.md"))["Client"]
    table = _options_table(client, after="**Keyword options**")
    _compare("reference.md Client keyword options table", table, _real_params(Client.__init__)[1:])


@pytest.mark.parametrize("verb", VERBS)
def test_verb_signature(verb: str) -> None:
    documented = _documented_params(_client_block(), verb)
    real = _real_params(getattr(Client, verb))
    assert documented == real, f"reference.md shows {verb}({documented}), the code has {real}"
    annotation = inspect.signature(getattr(Client, verb)).parameters["options"].annotation
    assert str(annotation) == f"Unpack[{_request_options().__name__}]"


def test_request_options_block_matches_typed_dict() -> None:
    typed_dict = _request_options()
    block = _client_block()
    match = re.search(rf"^class {typed_dict.__name__}\(TypedDict.*?\n((?:    .*\n)+)", block, re.M)
    assert match, f"reference.md shows no `class {typed_dict.__name__}(TypedDict, ...)`"
    documented = re.findall(rf"^    ({_NAME}):", match.group(1), flags=re.MULTILINE)
    _compare(f"reference.md {typed_dict.__name__}", documented, _option_keys(typed_dict))


# -- (c) the guide's per-call options -----------------------------------------------------------


def _options_table(text: str, *, after: str) -> list[str]:
    """The first-column names of the first ``| option ...`` table following ``after``."""
    start = text.index(after)
    lines = text[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| option"))
    rows = []
    for line in lines[first + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    names = []
    for row in rows:
        cell = row.split("|")[1]
        found = re.findall(rf"`({_NAME})`", cell)
        assert found, f"an options table row names no option: {row}"
        names.extend(found)
    return names


def test_guide_per_call_options_table() -> None:
    section = _sections(_read("guide.md"))["Per-call options"]
    table = _options_table(section, after="")
    _compare("guide.md per-call options table", table, _option_keys(_request_options()))


# -- (d) httpx.md's mapping ---------------------------------------------------------------------


def _keywords(span: str) -> list[tuple[str | None, str]]:
    """Each ``name=`` in a code span, with the callable it is passed to (``None``: top level)."""
    found: list[tuple[str | None, str]] = []
    stack: list[str | None] = []
    for match in re.finditer(rf"({_NAME}(?:\.{_NAME})*)\(|({_NAME})=(?!=)|[()]", span):
        callee, keyword = match.group(1), match.group(2)
        if callee is not None:
            stack.append(callee.removeprefix("trio_retry."))
        elif keyword is not None:
            found.append((stack[-1] if stack else None, keyword))
        elif match.group(0) == "(":
            stack.append("")  # a tuple or a call of no interest
        elif stack:
            stack.pop()
    return found


def _mapping_rows() -> list[list[str]]:
    section = _sections(_read("httpx.md"))["What maps to what"]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_httpx_mapping_names_real_options() -> None:
    per_call = _option_keys(_request_options())
    client = set(_real_params(Client.__init__)[1:])
    problems = []
    for httpx_cell, ours, note in _mapping_rows():
        cells = [ours, note]
        if ours.startswith("the same"):
            cells.append(httpx_cell)  # the httpx spelling is ours too
        for cell in cells:
            for span in _SPAN.findall(cell):
                for names in re.findall(rf"\btrio_retry\.({_NAME})", span):
                    if names not in trio_retry.__all__:
                        problems.append(f"trio_retry.{names} (in {span})")
                for callee, keyword in _keywords(span):
                    if callee is None:
                        valid = client | per_call
                    elif callee == "Client":
                        valid = client
                    elif callee in trio_retry.__all__:
                        valid = set(inspect.signature(getattr(trio_retry, callee)).parameters)
                    else:
                        continue  # httpx's own (httpx.Timeout(...)) or not ours
                    if keyword not in valid:
                        problems.append(f"{callee or ''}({keyword}=) in {span}")
    assert not problems, f"httpx.md maps to options that do not exist: {problems}"


# -- (e) Response's methods ---------------------------------------------------------------------


def test_response_methods_match_the_code() -> None:
    blocks = [
        code for code in _SIGNATURES.findall(_read("reference.md")) if "class Response:" in code
    ]
    assert len(blocks) == 1, "reference.md has one signature block with `class Response:`"
    methods = re.findall(rf"^    (?:async )?def ({_NAME})\((.*?)\)\s*->", blocks[0], re.M)
    assert methods, "reference.md's Response block shows no methods"
    options: set[str] = set()
    for name, params in methods:
        documented = [re.split(r"[:=]", part)[0].strip() for part in _split_params(params)]
        real = _real_params(getattr(trio_retry.Response, name))
        assert documented == real, f"reference.md shows {name}({documented}), the code has {real}"
        options.update(p for p in real if p != "self" and not p.startswith("*"))
    section = _read("reference.md").split("### `Response`", 1)[1].split("\n### ", 1)[0]
    _compare("reference.md Response options table", _options_table(section, after=""), options)
