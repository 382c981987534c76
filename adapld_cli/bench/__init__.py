"""`adapld bench`: speed of plain decoding, transformers' generate, PLD and AdaPLD.

Public API (nothing heavy is imported until a benchmark runs)::

    from adapld_cli.bench import load_tasks, parse_methods, BenchRunner, BenchOptions
    from adapld_cli.bench import BenchResults, document, markdown, rich_table, BenchError

- :func:`load_tasks` reads CanItEdit-format JSONL (default: the built-in suite, ``tasks.jsonl``).
- :class:`BenchRunner` runs every method on every task, interleaved, on the prompts
  ``adapld edit`` builds, one row per (task, method).
- :class:`BenchResults` holds a run's rows (or rows merged from earlier reports), builds the
  JSON document (:func:`document`), writes it and decides the exit code; :func:`run_meta`
  describes the run.
- :func:`markdown`, :func:`rich_table` and :func:`write_plot` render a document.
- :mod:`adapld_cli.bench.verify_cost` measures the per-n forward cost (``--verify-cost``).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> defining module; imported on first use, so `adapld --help` (which reads the
# method names from ``adapld_cli.bench.methods``) does not pay for the rest of the package
_EXPORTS = {
    "load_average": "meta",
    "run_meta": "meta",
    "ABLATIONS": "methods",
    "ALL_METHODS": "methods",
    "BASELINES": "methods",
    "DEFAULT_METHODS": "methods",
    "HF_PLD_TOKENS": "methods",
    "VARIANTS": "methods",
    "parse_methods": "methods",
    "write_plot": "plot",
    "document": "report",
    "markdown": "report",
    "problems": "report",
    "progress_line": "report",
    "rich_table": "report",
    "summarize": "report",
    "BenchResults": "results",
    "BenchOptions": "runner",
    "BenchRunner": "runner",
    "BenchError": "tasks",
    "Task": "tasks",
    "builtin_tasks_path": "tasks",
    "load_tasks": "tasks",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"adapld_cli.bench.{module}"), name)


__all__ = [
    "ABLATIONS",
    "ALL_METHODS",
    "BASELINES",
    "DEFAULT_METHODS",
    "HF_PLD_TOKENS",
    "VARIANTS",
    "BenchError",
    "BenchOptions",
    "BenchResults",
    "BenchRunner",
    "Task",
    "builtin_tasks_path",
    "document",
    "load_average",
    "load_tasks",
    "markdown",
    "parse_methods",
    "problems",
    "progress_line",
    "rich_table",
    "run_meta",
    "summarize",
    "write_plot",
]
