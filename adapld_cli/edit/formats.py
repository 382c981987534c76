"""Data formats without a tree-sitter grammar: JSON, JSON Lines, TOML, YAML; notebooks refused.

For the integrator
------------------
- Before the model loads, for every path: ``reason = precheck(name)``; a reason (one line that
  starts with the file name) means ``raise InputError(reason)`` (exit 2). Today only notebooks
  (``.ipynb``) have one: rewriting a notebook as text would destroy its JSON.
- After generation, next to the tree-sitter check (``first_syntax_error``): ::

      issue = check_format(source.text, new_text, source.name)
      if issue is not None and not force:   # same SyntaxIssue type as syntax.py returns
          status, message = "refused", (
              f"the edited file does not parse ({issue}); nothing written "
              "(--force writes it anyway)"
          )

  :func:`check_format` returns the first parse error of ``after`` only when ``before`` parsed
  (a ``config.json`` with comments, i.e. JSONC, is not JSON to begin with: no check), and
  ``None`` for files of no known format. ``str(issue)`` reads ``line 3: invalid JSON:
  Expecting property name enclosed in double quotes``.

Formats are detected by file name (:func:`format_for`): ``.json``, ``.jsonl``/``.ndjson``,
``.toml`` (also ``Pipfile``, ``Cargo.lock``, ``poetry.lock``), ``.yaml``/``.yml``, ``.ipynb``.
Files without an extension get no format check; the scope guard's line rule
(:mod:`adapld_cli.edit.guard`) still covers them. Parsers: stdlib ``json``, ``tomllib``
(``tomli`` on Python 3.10), PyYAML's safe composer (tags are not constructed, so ``!Ref`` and
friends parse); a missing parser means no check, like a missing grammar.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath
from typing import Any

from adapld_cli.edit.syntax import SyntaxIssue

_BY_SUFFIX = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".ipynb": "notebook",
}
_BY_NAME = {"pipfile": "toml", "cargo.lock": "toml", "poetry.lock": "toml"}
_LABELS = {"json": "JSON", "jsonl": "JSON Lines", "toml": "TOML", "yaml": "YAML"}


def format_for(filename: str | None) -> str | None:
    """``"json"``, ``"jsonl"``, ``"toml"``, ``"yaml"``, ``"notebook"`` or ``None``, by name."""
    if not filename:
        return None
    path = PurePath(filename)
    return _BY_NAME.get(path.name.lower()) or _BY_SUFFIX.get(path.suffix.lower())


def precheck(filename: str | None) -> str | None:
    """A one-line reason to refuse ``filename`` before the model loads (exit 2), or ``None``.

    Notebooks are refused: the model rewrites a whole file, and a notebook's JSON (cells,
    outputs, metadata) would come back as bare code."""
    if format_for(filename) == "notebook":
        name = PurePath(filename or "").name
        return (
            f"{name}: notebooks (.ipynb) are not edited: the notebook's JSON would be "
            "rewritten as text; edit its code as a .py file (e.g. with jupytext)"
        )
    return None


def first_format_error(text: str, fmt: str | None) -> SyntaxIssue | None:
    """The first parse error of ``text`` as ``fmt`` (1-based line and column), or ``None``
    when it parses, when ``fmt`` is not a checked format, or when its parser is missing."""
    checker = _CHECKERS.get(fmt or "")
    return checker(text) if checker is not None else None


def check_format(before: str, after: str, filename: str | None) -> SyntaxIssue | None:
    """The parse error of ``after`` when ``before`` parsed as the format of ``filename``
    (a result that broke a valid file); ``None`` otherwise."""
    fmt = format_for(filename)
    if fmt not in _CHECKERS or first_format_error(before, fmt) is not None:
        return None
    return first_format_error(after, fmt)


def _json(text: str) -> SyntaxIssue | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return SyntaxIssue(exc.lineno, exc.colno, f"invalid JSON: {exc.msg}")
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep
        return SyntaxIssue(1, 1, f"invalid JSON: {exc}")
    return None


def _jsonl(text: str) -> SyntaxIssue | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            issue = _json(line)
            if issue is not None:
                return SyntaxIssue(number, issue.column, issue.message.replace("JSON", "JSON line"))
    return None


def _toml(text: str) -> SyntaxIssue | None:
    parser = _toml_parser()
    if parser is None:
        return None
    try:
        parser.loads(text)
    except parser.TOMLDecodeError as exc:
        line, column = _toml_position(exc, text)
        message = str(exc).split(" (at ", 1)[0]
        return SyntaxIssue(line, column, f"invalid TOML: {message}")
    return None


def _toml_parser() -> Any | None:
    try:
        import tomllib as parser  # Python >= 3.11
    except ImportError:
        try:
            import tomli as parser  # Python 3.10 (a dependency there)
        except ImportError:
            return None
    return parser


def _toml_position(exc: Exception, text: str) -> tuple[int, int]:
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if isinstance(line, int) and isinstance(column, int):  # Python >= 3.14
        return line, column
    m = re.search(r"line (\d+), column (\d+)", str(exc))
    if m:
        return int(m.group(1)), int(m.group(2))
    return (len(text.splitlines()) or 1), 1  # "at end of document"


def _yaml(text: str) -> SyntaxIssue | None:
    try:
        import yaml
    except ImportError:
        return None
    try:
        for _ in yaml.compose_all(text, Loader=yaml.SafeLoader):
            pass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = exc.problem or exc.context or "syntax error"
        return SyntaxIssue(line, column, f"invalid YAML: {problem}")
    except yaml.YAMLError as exc:
        return SyntaxIssue(1, 1, f"invalid YAML: {exc}")
    return None


# -- keys of data documents (the scope guard's "definitions" for data files) -------------------
_MAX_DEPTH = 64


def data_keys(text: str, fmt: str | None) -> list[str] | None:
    """Every mapping key of a JSON/TOML/YAML document as a dotted path (``tool.ruff.select``;
    keys inside list items share the list's path, so they repeat), in document order.
    ``None`` when ``fmt`` is not one of those or ``text`` does not parse."""
    if fmt not in {"json", "toml", "yaml"} or first_format_error(text, fmt) is not None:
        return None
    if fmt == "yaml":
        return _yaml_keys(text)
    if fmt == "json":
        value = json.loads(text, object_pairs_hook=_Pairs)
    else:
        parser = _toml_parser()
        if parser is None:
            return None
        value = parser.loads(text)
    out: list[str] = []
    _walk_keys(value, "", out, 0)
    return out


class _Pairs(list):
    """A JSON object kept as its (key, value) pairs (duplicate keys included)."""


def _walk_keys(value: Any, prefix: str, out: list[str], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    pairs = (
        value if isinstance(value, _Pairs) else value.items() if isinstance(value, dict) else None
    )
    if pairs is not None:
        for key, inner in pairs:
            path = f"{prefix}{key}"
            out.append(path)
            _walk_keys(inner, path + ".", out, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            _walk_keys(inner, prefix, out, depth + 1)


def _yaml_keys(text: str) -> list[str] | None:
    try:
        import yaml
    except ImportError:
        return None
    out: list[str] = []
    for document in yaml.compose_all(text, Loader=yaml.SafeLoader):
        _walk_yaml(document, "", out, 0)
    return out


def _walk_yaml(node: Any, prefix: str, out: list[str], depth: int) -> None:
    import yaml

    if node is None or depth > _MAX_DEPTH:
        return
    if isinstance(node, yaml.MappingNode):
        for key, inner in node.value:
            label = key.value if isinstance(key, yaml.ScalarNode) else "?"
            out.append(f"{prefix}{label}")
            _walk_yaml(inner, f"{prefix}{label}.", out, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for inner in node.value:
            _walk_yaml(inner, prefix, out, depth + 1)


_CHECKERS = {"json": _json, "jsonl": _jsonl, "toml": _toml, "yaml": _yaml}


def format_label(fmt: str | None) -> str:
    """Human name of a format id (``"json"`` -> ``"JSON"``)."""
    return _LABELS.get(fmt or "", fmt or "text")


__all__ = [
    "check_format",
    "data_keys",
    "first_format_error",
    "format_for",
    "format_label",
    "precheck",
]
