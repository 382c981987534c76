"""The real-size edit tasks of ``adapld_cli/bench/bigfiles.jsonl`` are sound (fast, no model).

Each row names an installed module of 300-2,000 lines (rich, click, jinja2, ...), an
instruction, the reference edit as string replacements and a test script. For every task whose
package is installed at the version the row was written against (others are skipped, with the
reason): the reference applies to the installed source (``after`` is set); the tests fail on
the untouched module and pass on the reference (run as ``adapld bench --run-tests`` runs them);
``touches`` names exactly the definitions the reference changes, adds, removes or renames
(both names), so that anything else a model changes counts as unrelated; and the scope guard
keeps the reference (``check_scope`` loses nothing, ``check_unasked`` finds nothing) — it must
not refuse a correct edit. The file as a whole has at least 20 tasks on at least 10 modules,
with every kind of edit.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

import adapld_cli.bench
from adapld_cli.bench.tasks import Task, load_tasks
from adapld_cli.bench.testrun import passes
from adapld_cli.edit.guard import check_scope, check_unasked
from adapld_cli.edit.syntax import changed_definitions

PATH = Path(adapld_cli.bench.__file__).with_name("bigfiles.jsonl")
ROWS: list[dict[str, Any]] = [
    json.loads(line) for line in PATH.read_text(encoding="utf-8").splitlines() if line.strip()
]
KINDS = ("rename", "docstring", "parameter", "error", "method")
MIN_LINES, MAX_LINES = 300, 2000


@functools.cache
def installed_version(module: str) -> str | None:
    """The installed version of the distribution that provides ``module``, or ``None``."""
    for dist in importlib.metadata.packages_distributions().get(module.split(".")[0], []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def current(row: dict[str, Any]) -> bool:
    return installed_version(row["module"]) == row["version"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    """The tasks by name; where a package is missing, only the rows whose module is installed
    (the loader refuses a module it cannot read)."""
    if all(installed_version(row["module"]) for row in ROWS):
        return {t.name: t for t in load_tasks(PATH)}
    path = tmp_path_factory.mktemp("bigfiles") / "installed.jsonl"
    kept = [json.dumps(row) for row in ROWS if installed_version(row["module"])]
    if not kept:
        pytest.skip("none of the packages of bigfiles.jsonl is installed")
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return {t.name: t for t in load_tasks(path)}


def test_the_file_covers_enough_tasks_modules_and_kinds() -> None:
    names = [row["name"] for row in ROWS]
    assert len(ROWS) >= 20
    assert len(set(names)) == len(names)
    assert len({row["module"] for row in ROWS}) >= 10
    assert set(KINDS) <= {row["kind"] for row in ROWS}
    for row in ROWS:
        assert not row["module"].startswith("adapld_cli"), row["name"]
        assert row["touches"] and row["reference"] and row["tests"].strip(), row["name"]
        assert isinstance(row["version"], str) and row["version"], row["name"]


@pytest.mark.parametrize("name", [row["name"] for row in ROWS])
def test_task_is_sound(name: str, tasks: dict[str, Task]) -> None:
    row = next(r for r in ROWS if r["name"] == name)
    if not current(row):
        have = installed_version(row["module"]) or "not installed"
        pytest.skip(f"{row['module']}: written for {row['version']}, installed: {have}")
    task = tasks[name]
    before, after = task.before, task.after

    assert MIN_LINES <= len(before.splitlines()) <= MAX_LINES
    assert after is not None, "the reference does not apply to the installed source"
    assert passes(after, task.tests or ""), "the tests fail on the reference"
    assert not passes(before, task.tests or ""), "the tests pass on the untouched module"

    changes = changed_definitions(before, after, "python")
    changed = {*changes.changed, *changes.added, *changes.removed}
    changed |= {n for pair in changes.renamed for n in pair}
    assert changed == set(task.touches or ()), changes.describe()

    scope = check_scope(before, after, language="python", instruction=task.instruction)
    assert not scope.lost, scope
    unasked = check_unasked(before, after, language="python", instruction=task.instruction)
    assert unasked is None, unasked
