"""`adapld bench`: speed of plain decoding, transformers' prompt lookup, PLD and AdaPLD.

Public API (nothing heavy is imported until a benchmark runs)::

    from adapld_cli.bench import load_tasks, parse_methods, BenchRunner, BenchOptions
    from adapld_cli.bench import document, markdown, rich_table, write_plot, BenchError

- :func:`load_tasks` reads CanItEdit-format JSONL (default: the built-in suite, ``tasks.jsonl``).
- :class:`BenchRunner` runs every method on every task, interleaved, on the prompts
  ``adapld edit`` builds, one row per (task, method).
- :func:`document` summarises rows per method (the JSON document); :func:`markdown`,
  :func:`rich_table` and :func:`write_plot` render it.
"""

from adapld_cli.bench.methods import ABLATIONS, ALL_METHODS, DEFAULT_METHODS, parse_methods
from adapld_cli.bench.plot import write_plot
from adapld_cli.bench.report import document, markdown, problems, rich_table, summarize
from adapld_cli.bench.runner import BenchOptions, BenchRunner
from adapld_cli.bench.tasks import BenchError, Task, builtin_tasks_path, load_tasks

__all__ = [
    "ABLATIONS",
    "ALL_METHODS",
    "DEFAULT_METHODS",
    "BenchError",
    "BenchOptions",
    "BenchRunner",
    "Task",
    "builtin_tasks_path",
    "document",
    "load_tasks",
    "markdown",
    "parse_methods",
    "problems",
    "rich_table",
    "summarize",
    "write_plot",
]
