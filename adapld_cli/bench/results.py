"""The results of a benchmark, measured now or merged from earlier reports, and their outputs.

Contract: :class:`BenchResults` holds what a report is made from (rows, skipped tasks,
reference-solution test results, methods, ``meta``, whether the run was interrupted).
:meth:`BenchResults.measure` runs a :class:`~adapld_cli.bench.runner.BenchRunner` and
describes the run.
:meth:`BenchResults.merge` reads earlier ``--json`` reports and joins their rows (halves of one
task list run in parallel, say); a file that is not a report, or a (task, method) pair seen
twice, raises :class:`~adapld_cli.bench.tasks.BenchError`. :meth:`document` is the JSON
document (:func:`~adapld_cli.bench.report.document`), :meth:`write` writes it as JSON,
Markdown and a plot (``-`` = stdout), and :meth:`exit_code` is the command's exit status:
130 interrupted, 1 when an output that must equal ``ar`` does not, else 0.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapld_cli.bench.meta import load_average, run_meta
from adapld_cli.bench.report import document, markdown
from adapld_cli.bench.tasks import BenchError, builtin_tasks_path

if TYPE_CHECKING:
    from adapld_cli.bench.runner import BenchRunner


@dataclass
class BenchResults:
    """A report's material: ``rows`` (one JSON-ready dict per (task, method), see
    :mod:`adapld_cli.bench.runner`), ``methods`` in report order, ``meta`` (see
    :func:`~adapld_cli.bench.meta.run_meta`), tasks ``skipped`` with reasons,
    ``reference_pass`` (task -> whether its reference solution passed its tests)."""

    meta: dict[str, Any]
    methods: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    reference_pass: dict[str, bool] = field(default_factory=dict)
    interrupted: bool = False

    @classmethod
    def measure(
        cls,
        runner: BenchRunner,
        *,
        tasks_file: Path | None,
        instruction: str,
        on_interrupt: Callable[[], None] | None = None,
    ) -> BenchResults:
        """Run ``runner`` and describe the run (:func:`~adapld_cli.bench.meta.run_meta`).
        Ctrl-C stops it: what was measured is kept, ``interrupted`` is set and
        ``on_interrupt`` called. ``tasks_file`` None = the built-in suite."""
        started, load_start = time.time(), load_average()
        interrupted = False
        try:
            runner.run()
        except KeyboardInterrupt:
            interrupted = True
            if on_interrupt is not None:
                on_interrupt()
        meta = run_meta(
            runner.loaded,
            tasks_file=str(tasks_file or builtin_tasks_path()),
            instruction=instruction,
            n_tasks=len(runner.tasks),
            options=runner.options,
            started=started,
            warmup_s=runner.warmup_s,
            load_start=load_start,
            baseline_model=runner.stock.describe() if runner.stock else None,
        )
        methods = list(runner.options.labels)
        rows, skipped, ref = runner.rows, runner.skipped, runner.reference_pass
        return cls(meta, methods, rows, skipped, ref, interrupted)

    @classmethod
    def merge(cls, paths: list[Path]) -> BenchResults:
        """Join the rows of earlier reports; ``meta`` is the first one's plus ``merged_from``."""
        out: BenchResults | None = None
        metas: list[dict[str, Any]] = []
        for path in paths:
            part = _read_report(path)
            metas.append(part.meta)
            if out is None:
                out = part
                continue
            seen = {(r["task"], r["method"]) for r in out.rows}
            if any((r["task"], r["method"]) in seen for r in part.rows):
                raise BenchError(f"--from-json {path}: repeats a (task, method) already loaded")
            out.rows += part.rows
            out.skipped += part.skipped
            out.reference_pass.update(part.reference_pass)
            out.methods += [m for m in part.methods if m not in out.methods]
            out.interrupted = out.interrupted or part.interrupted
        if out is None:
            raise BenchError("--from-json: no report given")
        out.meta = dict(out.meta)
        out.meta["n_tasks"] = len({r["task"] for r in out.rows})
        out.meta["merged_from"] = [
            {"file": str(p), "command": m.get("command"), "git": m.get("git")}
            for p, m in zip(paths, metas, strict=True)
        ]
        return out

    def document(self) -> dict[str, Any]:
        doc = document(self.meta, self.rows, self.methods, self.skipped, self.reference_pass)
        doc["meta"]["interrupted"] = self.interrupted
        return doc

    def write(
        self,
        doc: dict[str, Any],
        *,
        json_to: str | None = None,
        markdown_to: str | None = None,
        plot_to: Path | None = None,
    ) -> None:
        """Write ``doc`` (from :meth:`document`) where asked; raises OSError or BenchError."""
        if json_to is not None:
            _write(json_to, json.dumps(doc, indent=2) + "\n")
        if markdown_to is not None:
            _write(markdown_to, markdown(doc))
        if plot_to is not None and doc["tasks"]:
            from adapld_cli.bench.plot import write_plot

            write_plot(doc, plot_to)

    def exit_code(self, doc: dict[str, Any]) -> int:
        if self.interrupted:
            return 130
        return 1 if doc["problems"] else 0


def _read_report(path: Path) -> BenchResults:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        meta = dict(doc.get("meta", {}))
        return BenchResults(
            meta=meta,
            methods=list(doc["methods"]),
            rows=list(doc["tasks"]),
            skipped=list(doc.get("skipped", [])),
            reference_pass=dict(doc.get("reference_pass", {})),
            interrupted=bool(meta.get("interrupted")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BenchError(f"--from-json {path}: not a bench report ({exc})") from None


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(target).write_text(text, encoding="utf-8")
