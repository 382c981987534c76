"""Benchmark tasks: CanItEdit-format JSONL files, and the small suite shipped with adapld.

Contract: :func:`load_tasks` reads one JSON object per line with at least ``before`` and an
instruction (``instruction_descriptive``, ``instruction_lazy`` or ``instruction``); ``after``
(a reference solution), ``tests`` (a script appended to the edited code and run), ``name``,
``id`` and ``full_name`` are optional. Blank lines are skipped. Problems raise
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

    @property
    def filename(self) -> str:
        """The file name the prompt shows (the language comes from its suffix)."""
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


def _matches(row: dict[str, Any], task: Task, names: list[str]) -> bool:
    keys = {task.name, str(row.get("name", "")), str(row.get("id", ""))}
    return any(n in keys for n in names)
