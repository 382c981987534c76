"""Benchmark tasks: CanItEdit-format JSONL files, and the small suite shipped with adapld.

Contract: :func:`load_tasks` reads one JSON object per line with at least ``before`` and an
instruction (``instruction_descriptive``, ``instruction_lazy`` or ``instruction``); ``after``
(a reference solution), ``tests`` (a script appended to the edited code and run), ``name``,
``id`` and ``full_name`` are optional. Blank lines are skipped.

A row may name an installed module instead of giving ``before`` (real-size files,
``bigfiles.jsonl``): ``module`` (``"rich.color"``; its source is read from the installed
package, relative imports made absolute so that the file runs on its own), ``reference`` (the
reference edit as ``[old, new]`` string replacements, each ``old`` found exactly once; a
reference that does not apply to the installed version leaves ``after`` unset), ``touches``
(the definitions the edit may change: anything else changed is an unrelated change) and
``version`` (the package version the task was written against, for the report). Problems raise
:class:`BenchError` with a one-line message (the CLI exits 2). Without a path the built-in suite
(``adapld_cli/bench/tasks.jsonl``, written for this project) is loaded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTRUCTION_KINDS = ("descriptive", "lazy")


class BenchError(Exception):
    """Bad benchmark input (task file, method list, options). ``str()`` is one line."""


@dataclass(frozen=True)
class Task:
    """One edit task."""

    name: str  # unique, readable: CanItEdit's ``full_name`` (e.g. ``10_csv_parser``)
    before: str
    instruction: str
    after: str | None = None
    tests: str | None = None
    touches: tuple[str, ...] | None = None  # definitions the edit may change (None: unknown)
    file: str | None = None  # the file name to show (a module's own); default from ``name``

    @property
    def filename(self) -> str:
        """The file name the prompt shows (the language comes from its suffix)."""
        if self.file:
            return self.file
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("_.") or "task"
        return stem if stem.endswith(".py") else f"{stem}.py"


def builtin_tasks_path() -> Path:
    """The suite shipped with adapld."""
    return Path(__file__).with_name("tasks.jsonl")


def load_tasks(
    path: str | Path | None = None,
    *,
    instruction: str = "descriptive",
    limit: int | None = None,
    offset: int = 0,
    names: list[str] | None = None,
) -> list[Task]:
    """Tasks from ``path`` (default: the built-in suite), optionally filtered by ``names``
    (matching ``full_name``, ``name`` or ``id``), then ``offset`` and ``limit`` applied."""
    if instruction not in INSTRUCTION_KINDS:
        raise BenchError(f"--instruction {instruction}: use one of {', '.join(INSTRUCTION_KINDS)}")
    file = Path(path) if path is not None else builtin_tasks_path()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(
            f"--tasks {file}: cannot read ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    tasks: list[Task] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{file}:{lineno}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise BenchError(f"{file}:{lineno}: expected a JSON object")
        task = _task(row, instruction, f"{file}:{lineno}", len(tasks))
        if names and not _matches(row, task, names):
            continue
        if task.name in seen:
            raise BenchError(f"{file}:{lineno}: duplicate task name {task.name!r}")
        seen.add(task.name)
        tasks.append(task)
    tasks = tasks[offset:]
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise BenchError(f"--tasks {file}: no tasks selected")
    return tasks


def _task(row: dict[str, Any], kind: str, where: str, index: int) -> Task:
    if "module" in row and "before" not in row:
        return _module_task(row, kind, where, index)
    before = row.get("before")
    if not isinstance(before, str):
        raise BenchError(f"{where}: missing the 'before' text")
    instr = row.get(f"instruction_{kind}") or row.get("instruction")
    if not isinstance(instr, str) or not instr.strip():
        raise BenchError(f"{where}: missing 'instruction_{kind}'")
    name = row.get("full_name") or row.get("name") or row.get("id")
    name = str(name) if name is not None else f"task{index + 1}"
    after, tests = row.get("after"), row.get("tests")
    return Task(
        name=name,
        before=before,
        instruction=instr.strip(),
        after=after if isinstance(after, str) else None,
        tests=tests if isinstance(tests, str) and tests.strip() else None,
    )


def _module_task(row: dict[str, Any], kind: str, where: str, index: int) -> Task:
    """A task on an installed module (module contract)."""
    module = row["module"]
    before = module_source(str(module))
    if before is None:
        raise BenchError(f"{where}: module {module!r} is not installed or has no source")
    after: str | None = before
    for old, new in row.get("reference") or []:
        after = after.replace(old, new) if after is not None and after.count(old) == 1 else None
    task = _task({**row, "before": before, "after": None}, kind, where, index)
    touches = row.get("touches")
    return Task(
        name=task.name,
        before=before,
        instruction=task.instruction,
        after=after if row.get("reference") else None,
        tests=task.tests,
        touches=tuple(touches) if isinstance(touches, list) else None,
        file=str(module).rsplit(".", 1)[-1] + ".py",
    )


def module_source(module: str) -> str | None:
    """The source of installed ``module``, its relative imports made absolute."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    text = Path(spec.origin).read_text(encoding="utf-8")
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    return _absolute_imports(text, package)


_RELATIVE_IMPORT_RE = re.compile(r"^(\s*from\s+)(\.+)([\w.]*)(\s+import\b)", re.MULTILINE)


def _absolute_imports(text: str, package: str) -> str:
    """``from .x import y`` -> ``from pkg.x import y`` (``..`` climbs one package)."""

    def absolute(m: re.Match[str]) -> str:
        parts = package.split(".")
        base = parts[: len(parts) - (len(m.group(2)) - 1)]
        target = ".".join([*base, m.group(3)] if m.group(3) else base)
        return f"{m.group(1)}{target}{m.group(4)}"

    return _RELATIVE_IMPORT_RE.sub(absolute, text)


def _matches(row: dict[str, Any], task: Task, names: list[str]) -> bool:
    keys = {task.name, str(row.get("name", "")), str(row.get("id", ""))}
    return any(n in keys for n in names)
