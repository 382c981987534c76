"""The scope guard on real edit tasks, both ways, fast (no model).

The tasks: the repository's own (``adapld_cli/bench/tasks.jsonl`` and the six edit cases of
``edit_cases.jsonl``: real files, reference edits), or any task file in CanItEdit's format
named by ``$ADAPLD_GUARD_TASKS`` (docs/usage.md's figures on CanItEdit's 105 tasks::

    ADAPLD_GUARD_TASKS=PATH/canitedit.jsonl pytest tests/test_guard_canitedit.py

1. **Reference edits are accepted**: ``before`` -> ``after`` with either instruction (descriptive
   or lazy): at most :data:`MAX_REFUSED_REFERENCES` task refused (a task counts once, refused
   by either instruction) by :func:`check_scope` or :func:`check_unasked` (on CanItEdit in
   December 2026: one, 66_product_analysis, whose reference adds a row to the CSV table
   ``data`` that neither instruction mentions).
2. **Destructive outputs are refused**: variants built from each ``after`` (as the model's
   answer to the task) with Python's :mod:`ast`, independently of the guard's tree-sitter walk:

   - ``fragment``: the file reduced to one of its top-level definitions (each in turn);
   - ``dropped``: the file with one definition removed (each top-level definition and method
     in turn; a class left without a body gets ``pass``);
   - ``cut``: the file cut at the first line boundary of its second half where it still
     parses and code follows (the answer of a model that stopped early).

   A variant *counts* only when it is destructive by a measure that does not use the guard
   (:func:`damage`): it loses a name (a definition, an import, a top-level assignment) that
   ``before`` and ``after`` both have and the instruction does not name (the name or its last
   dotted part as a whole word; a method goes with a dropped class the instruction names), or
   (``cut``) a function that ``before`` and ``after`` both have, that the instruction does not
   name, lost its value ``return`` or more than half of its statements against ``after``. The
   others (the fragment that is the whole file, dropping what the instruction names or what
   the edit added, a cut that only shortens code the edit added) are acceptable edits or none
   of the guard's business and are left out. At least :data:`MIN_REFUSED_SHARE` of the counted
   variants of each kind must be refused, and at least :data:`MIN_COUNTED` of them must count.
   On CanItEdit in December 2026: fragments 463 of 528 built count, dropped 1002 of 1424, cut
   151 of 208 (both instruction kinds); all are refused.
"""

from __future__ import annotations

import ast
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import pytest

from adapld_cli.bench.tasks import Task, builtin_tasks_path, load_tasks
from adapld_cli.edit.guard import ScopeVerdict, check_scope, check_unasked
from tests.test_edit_cases import CASES_PATH

ENV_TASKS = "ADAPLD_GUARD_TASKS"
KINDS = ("descriptive", "lazy")
MAX_REFUSED_REFERENCES = 1
MIN_REFUSED_SHARE = 0.97
# counted variants of each kind, so that a filter bug cannot pass vacuously: per task file
# (the repository's own twelve tasks, or a file named by $ADAPLD_GUARD_TASKS)
MIN_COUNTED = {"own": 10, "env": 100}
SHAPES = ("fragment", "dropped", "cut")


@dataclass(frozen=True)
class Variant:
    """A destructive answer built from a task's reference ``after``."""

    task: str  # the task's full name
    kind: str  # the instruction kind
    shape: str  # "fragment" | "dropped" | "cut"
    what: str  # the definition kept, dropped, or the line the file was cut at
    text: str


@dataclass(frozen=True)
class Definition:
    """A function or class found by :mod:`ast`: qualified name and 1-based line span
    (decorators included)."""

    name: str
    node: ast.AST
    start: int
    end: int
    depth: int  # 0: top level; 1: a method or a nested function; ...


def task_files() -> list[str]:
    """The task files to judge: ``$ADAPLD_GUARD_TASKS``, else the repository's own."""
    named = os.environ.get(ENV_TASKS, "").strip()
    return [named] if named else [str(builtin_tasks_path()), str(CASES_PATH)]


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[Task]]:
    files = task_files()
    return {kind: [t for f in files for t in load_tasks(f, instruction=kind)] for kind in KINDS}


# -- the reference edits ---------------------------------------------------------------------
def refused_references(tasks: dict[str, list[Task]]) -> dict[str, list[str]]:
    """Per instruction kind, ``"task: message"`` for each reference edit the guard refuses."""
    out: dict[str, list[str]] = {}
    for kind, items in tasks.items():
        out[kind] = []
        for t in items:
            verdict = judge(t, t.after or "")
            unasked = check_unasked(
                t.before, t.after or "", language="python", instruction=t.instruction
            )
            if verdict.lost or unasked:
                out[kind].append(f"{t.name}: {verdict.message or unasked}")
    return out


def judge(task: Task, text: str) -> ScopeVerdict:
    """The guard's verdict on ``text`` as the answer to ``task``."""
    return check_scope(task.before, text, language="python", instruction=task.instruction)


def test_reference_edits_are_accepted(tasks):
    refused = refused_references(tasks)
    names = {line.split(":", 1)[0] for lines in refused.values() for line in lines}
    report = "\n".join(f"{k}: {line}" for k, lines in refused.items() for line in lines)
    total = len(tasks[KINDS[0]])
    assert len(names) <= MAX_REFUSED_REFERENCES, f"{len(names)} of {total} refused:\n{report}"


# -- the destructive variants ----------------------------------------------------------------
def definitions(tree: ast.AST) -> list[Definition]:
    """Every function and class of ``tree`` (nested ones too), in source order."""
    found: list[Definition] = []

    def walk(node: ast.AST, prefix: str, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(Definition(name, child, start, child.end_lineno or start, depth))
                walk(child, name, depth + 1)
            elif not isinstance(child, (ast.expr, ast.arguments)):
                walk(child, prefix, depth)

    walk(tree, "", 0)
    return sorted(found, key=lambda d: d.start)


@lru_cache(maxsize=512)
def parsed(text: str) -> ast.Module:
    """``ast.parse(text)``, cached (do not modify the tree)."""
    return ast.parse(text)


@lru_cache(maxsize=512)
def names(text: str) -> Counter[str]:
    """Definitions (as a multiset), top-level imports (the imported module or name) and
    top-level assignment targets of ``text`` (cached: do not modify the result)."""
    tree = parsed(text)
    found: Counter[str] = Counter(d.name for d in definitions(tree))
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update({a.name for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update({n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)})
    return found


def named(name: str, instruction: str) -> bool:
    """The instruction spells the name or its last dotted part as a whole word."""
    words = {name, name.rsplit(".", 1)[-1]}
    return any(re.search(rf"(?<![\w$]){re.escape(w)}(?![\w$])", instruction) for w in words)


def excused(name: str, lost: set[str], instruction: str) -> bool:
    """The instruction names ``name``, or a lost definition around it (dropping a class the
    instruction names drops its methods with it)."""
    parts = name.split(".")
    around = {".".join(parts[:k]) for k in range(1, len(parts))} & lost
    return any(named(n, instruction) for n in {name, *around})


def body_size(fn: ast.AST) -> tuple[int, bool]:
    """``(statements, returns a value)`` of a function: its statements at any depth (not a
    docstring), and whether it has a ``return <value>`` of its own."""
    body = list(getattr(fn, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    statements = sum(1 for s in body for n in ast.walk(s) if isinstance(n, ast.stmt))
    returns = any(isinstance(n, ast.Return) and n.value is not None for n in own_nodes(fn))
    return statements, returns


def own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, not those of functions, lambdas or classes in it."""
    out: list[ast.AST] = []
    stack = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        out.append(node)
        nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, nested))
    return out


def damage(task: Task, text: str, *, cut: bool = False) -> list[str]:
    """What ``text`` (an answer to ``task``) destroys, by :mod:`ast` alone: the names that
    ``before`` and ``after`` both have, that the instruction does not name, and that ``text``
    lost; with ``cut``, also the functions of ``before`` and ``after`` (not named) whose body
    lost its value return or more than half of its statements against ``after``."""
    before, after, now = names(task.before), names(task.after or ""), names(text)
    gone = {n for n in after if now[n] < min(before[n], after[n])}
    lost = [n for n in gone if not excused(n, gone, task.instruction)]
    if not cut:
        return lost
    kept = {d.name: d.node for d in definitions(parsed(task.after or ""))}
    for d in definitions(parsed(text)):
        if isinstance(d.node, ast.ClassDef) or d.name not in before or d.name not in kept:
            continue
        if named(d.name, task.instruction):
            continue
        (n_ref, ret_ref), (n_now, ret_now) = body_size(kept[d.name]), body_size(d.node)
        if (ret_ref and not ret_now) or 2 * n_now < n_ref:
            lost.append(f"{d.name} (body)")
    return lost


def fragments(task: Task, kind: str) -> list[Variant]:
    """The file reduced to each of its top-level definitions."""
    lines = (task.after or "").splitlines(keepends=True)
    tops = [d for d in definitions(parsed(task.after or "")) if d.depth == 0]
    return [
        Variant(task.name, kind, "fragment", d.name, "".join(lines[d.start - 1 : d.end]))
        for d in tops
    ]


def drops(task: Task, kind: str) -> list[Variant]:
    """The file without each of its top-level definitions and methods in turn."""
    text = task.after or ""
    lines = text.splitlines(keepends=True)
    out = []
    for d in definitions(parsed(text)):
        if d.depth > 1:
            continue
        rest = lines[: d.start - 1] + lines[d.end :]
        attempt = "".join(rest)
        if not parses(attempt):  # the class's only member: the class keeps a ``pass``
            indent = re.match(r"\s*", lines[d.start - 1]).group()
            attempt = "".join(lines[: d.start - 1] + [f"{indent}pass\n"] + lines[d.end :])
        if parses(attempt):
            out.append(Variant(task.name, kind, "dropped", d.name, attempt))
    return out


def cuts(task: Task, kind: str) -> list[Variant]:
    """The file cut at the first line boundary of its second half where it still parses and
    code follows (none when there is no such point)."""
    lines = (task.after or "").splitlines(keepends=True)
    for k in range(len(lines) // 2, len(lines)):
        if not any(line.strip() and not line.strip().startswith("#") for line in lines[k:]):
            break
        head = "".join(lines[:k])
        if head.strip() and parses(head):
            return [Variant(task.name, kind, "cut", f"line {k}", head)]
    return []


def parses(text: str) -> bool:
    try:
        parsed(text)
    except SyntaxError:
        return False
    return True


def variants(tasks: dict[str, list[Task]]) -> list[tuple[Variant, list[str]]]:
    """Every counted variant (see the module docstring) with the damage that counts it."""
    out = []
    for i in range(len(tasks[KINDS[0]])):  # a task's two kinds in a row: the caches hit
        for kind in KINDS:
            task = tasks[kind][i]
            for build in (fragments, drops, cuts):
                for v in build(task, kind):
                    hurt = damage(task, v.text, cut=v.shape == "cut")
                    if hurt:
                        out.append((v, hurt))
    return out


@pytest.fixture(scope="module")
def judged(tasks) -> list[tuple[Variant, list[str], bool]]:
    """Every counted variant, the damage that counts it, and whether the guard refuses it."""
    by_name = {(k, t.name): t for k, items in tasks.items() for t in items}
    return [(v, hurt, judge(by_name[(v.kind, v.task)], v.text).lost) for v, hurt in variants(tasks)]


@pytest.mark.parametrize("shape", SHAPES)
def test_destructive_variants_are_refused(judged, shape):
    mine = [(v, hurt, lost) for v, hurt, lost in judged if v.shape == shape]
    accepted = [
        f"{v.task} ({v.kind}) {v.what}: loses {', '.join(h)}" for v, h, lost in mine if not lost
    ]
    least = MIN_COUNTED["env" if os.environ.get(ENV_TASKS, "").strip() else "own"]
    assert len(mine) >= least, f"{shape}: only {len(mine)} variants count"
    share = 1 - len(accepted) / len(mine)
    assert share >= MIN_REFUSED_SHARE, (
        f"{shape}: {len(mine) - len(accepted)} of {len(mine)} refused ({share:.1%}); accepted:\n"
        + "\n".join(accepted)
    )
