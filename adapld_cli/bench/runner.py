"""The benchmark loop: every method on every task, interleaved, on the prompts `adapld edit` builds.

Contract: :class:`BenchRunner` takes a loaded model (anything with ``.model`` and
``.tokenizer``), tasks and :class:`BenchOptions`. :meth:`BenchRunner.run` first warms every
method up on a short generation, then for each task builds the prompt with
:class:`~adapld_cli.edit.LocalModel` (the same prompt, stop strings, stop tokens and token
budget as ``adapld edit``) and runs the methods one after another on it (task A: m1 m2 m3,
task B: m1 m2 m3, ...), so load on a shared machine hits all methods alike. Each run becomes
one row (a plain dict, JSON-ready) in :attr:`BenchRunner.rows`, appended as soon as it is
measured, so an interrupted run keeps what it measured. Outputs are turned into files by the
edit layer's own judge; with ``run_tests`` the task's test script runs against them.
Greedy outputs are compared token for token with ``ar`` of the same task. The transformers
baselines run on a stock model (:meth:`BenchRunner.model_for`), the engine's methods on the
loaded one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapld_cli.bench import memory, testrun
from adapld_cli.bench.methods import BASELINES, run_method
from adapld_cli.bench.report import PARTS_SUFFIX
from adapld_cli.bench.stock import StockModel
from adapld_cli.bench.tasks import Task
from adapld_cli.bench.types import MethodRun
from adapld_cli.engine.settings import AdaPLDSettings

WARMUP_TOKENS = 16


@dataclass
class BenchOptions:
    methods: list[str]
    max_new_tokens: int | None = None  # None: `adapld edit`'s budget for each file
    run_tests: bool = False
    test_timeout: float = 30.0
    template: str | None = None  # prompt template (name or file), as `adapld edit --prompt`
    warmup: bool = True
    settings: AdaPLDSettings | None = None
    save_outputs: str | None = None  # folder: write each extracted file as <task>.<method>.py
    attempts: int = 1  # generations per task and method, as `adapld edit --attempts`
    # the task's tests judge each changed result, a failing one is repaired with their output
    # (as `adapld edit --test`); rows get ``passed_at``, reported as pass@k with feedback
    test_feedback: bool = False
    # also run each method as `adapld edit` edits a big file, rewriting only the parts its
    # plan names (edit.parts): rows labelled ``<method>/parts`` beside the whole-file ones
    parts: bool = False
    whole: bool = True  # the whole-file rows (False: --parts-only)

    @property
    def labels(self) -> list[str]:
        """The row labels: the methods (whole-file rows), then ``<method>/parts``."""
        whole = self.methods if self.whole or not self.parts else []
        return whole + ([f"{m}{PARTS_SUFFIX}" for m in self.methods] if self.parts else [])


@dataclass
class BenchRunner:
    loaded: Any
    tasks: list[Task]
    options: BenchOptions
    on_row: Callable[[dict[str, Any], int, int], None] | None = None  # row, index, total
    on_skip: Callable[[str, str], None] | None = None  # task name, reason
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    reference_pass: dict[str, bool] = field(default_factory=dict)
    warmup_s: float = 0.0
    stock: StockModel | None = None  # the transformers baselines' model (None: made on demand)
    # the engine's Workspaces, shared by every run (static passes' caches and graphs; made
    # in run()): the warm-up's captures serve the tasks
    workspaces: Any = None

    def model_for(self, method: str) -> Any:
        """The model ``method`` runs on: the stock model for the transformers baselines
        (:class:`~adapld_cli.bench.stock.StockModel`), adapld's loaded model otherwise."""
        if method not in BASELINES:
            return self.loaded.model
        if self.stock is None:
            self.stock = StockModel(self.loaded)
        return self.stock.get()

    def run(self) -> list[dict[str, Any]]:
        """Warm up, then measure every method on every task; returns :attr:`rows`."""
        from adapld_cli.edit import EditOptions, LocalModel
        from adapld_cli.engine import Workspaces

        if self.workspaces is None:
            self.workspaces = Workspaces()
        opts = self.options
        local = LocalModel(
            self.loaded,
            EditOptions(max_new_tokens=opts.max_new_tokens, attempts=opts.attempts),
            opts.template,
        )
        prepared = self._prepare(local)
        warm = next((p for _, p in prepared if p.conversation is not None), None)
        if opts.warmup and warm is not None:  # not a too-long file's (it has no prompt)
            self._warmup(warm)
        total = len(prepared) * len(opts.labels)
        for task, prep in prepared:
            if opts.run_tests and task.tests and task.after is not None:
                self.reference_pass[task.name] = testrun.passes(
                    task.after, task.tests, opts.test_timeout
                )
            self._run_task(local, task, prep, total)
        return self.rows

    def _prepare(self, local: Any) -> list[tuple[Task, Any]]:
        """Each task's prompt as ``adapld edit`` builds it (with ``parts``, with its plan: a
        file too long for a whole-file prompt is kept when a plan covers it); tasks it
        refuses are skipped."""
        from adapld_cli.edit import EditError, decode_source, prepare
        from adapld_cli.edit.parts import prepare_edit

        prepared: list[tuple[Task, Any]] = []
        make = prepare_edit if self.options.parts else prepare
        for task in self.tasks:
            try:
                source = decode_source(task.before.encode("utf-8"), task.filename)
                prepared.append((task, make(local, source, task.instruction)))
            except EditError as exc:
                self.skipped.append({"task": task.name, "reason": str(exc)})
                if self.on_skip:
                    self.on_skip(task.name, str(exc))
        return prepared

    def _run_task(self, local: Any, task: Task, prep: Any, total: int) -> None:
        """Every method on one task, one row each, compared with ``ar`` as soon as it ran."""
        opts = self.options
        task_rows: list[dict[str, Any]] = []
        ar_row: dict[str, Any] | None = None
        plan, prep = prep.plan, dataclasses.replace(prep, plan=None)
        whole = opts.whole or not opts.parts
        for method in opts.methods if whole and prep.conversation is not None else []:
            run, first, result, passed_at = self._attempts(local, method, prep, task)
            row = _row(task, method, run, result, first)
            self._judge_tests(row, task, first, result, passed_at)
            if opts.save_outputs:
                _save(opts.save_outputs, task, method, result.new_text)
            row["_tokens"] = run.tokens
            if method == "ar":
                ar_row = row
                _compare(rows=[*task_rows, row], ar_row=ar_row, ar_tokens=run.tokens)
            elif ar_row is not None:
                _compare(rows=[row], ar_row=ar_row, ar_tokens=ar_row["_tokens"])
            task_rows.append(row)
            self._add(row, total)
        if opts.parts:
            wholes = {row["method"]: row for row in task_rows}
            for method in opts.methods:
                row = self._parts_row(local, method, wholes.get(method), prep, plan, task)
                self._add(row, total)
        for row in task_rows:
            row.pop("_tokens", None)

    def _add(self, row: dict[str, Any], total: int) -> None:
        self.rows.append(row)
        if self.on_row:
            self.on_row(row, len(self.rows), total)

    def _parts_row(
        self,
        local: Any,
        method: str,
        whole: dict[str, Any] | None,
        prep: Any,
        plan: Any,
        task: Task,
    ) -> dict[str, Any]:
        """``method`` on the parts of ``plan``. Without a plan `adapld edit` rewrites the
        whole file: the whole-file row stands for it (same figures, ``plan`` None), or is
        measured now under this label when there is none (``--parts-only``)."""
        label = method + PARTS_SUFFIX
        if plan is None and whole is not None:
            row = {k: v for k, v in whole.items() if k != "_tokens"}
            return {**row, "method": label, "plan": None}
        planned = dataclasses.replace(prep, plan=plan)
        run, first, result, passed_at = self._attempts(local, method, planned, task)
        row = _row(task, label, run, result, first)
        row["plan"] = plan.as_dict() if plan is not None else None
        self._judge_tests(row, task, first, result, passed_at)
        if self.options.save_outputs:
            _save(self.options.save_outputs, task, label.replace("/", "-"), result.new_text)
        return row

    def _judge_tests(
        self, row: dict[str, Any], task: Task, first: Any, result: Any, passed_at: int | None
    ) -> None:
        """The tests' verdicts on the first and last results, and the changes outside the
        task's ``touches``."""
        opts = self.options
        if passed_at is not None or (opts.test_feedback and task.tests):
            row["passed_at"] = passed_at
        if opts.run_tests and task.tests:
            row["passed"] = testrun.passes(result.new_text, task.tests, opts.test_timeout)
            row["passed_first"] = (
                row["passed"]
                if first is result
                else testrun.passes(first.new_text, task.tests, opts.test_timeout)
            )
        if task.touches is not None:
            row["unrelated"] = unrelated_changes(task, result.new_text)

    def _attempts(
        self, local: Any, method: str, prep: Any, task: Task
    ) -> tuple[MethodRun, Any, Any, int | None]:
        """``method`` on one task with repairs as ``adapld edit`` makes them
        (:class:`~adapld_cli.edit.Attempts`, up to ``options.attempts``; with
        ``test_feedback`` the task's tests judge each changed result, as ``adapld edit
        --test``): the attempts' run as one (:func:`_joined`), the first attempt's result,
        the last, and the attempt whose result passed the tests (``None``: none, or not
        tested)."""
        from adapld_cli.edit import Attempts, Status, judge
        from adapld_cli.edit.parts import generate
        from adapld_cli.edit.testcmd import refuse_failing
        from adapld_cli.engine import PrefixCache

        opts = self.options
        runs: list[MethodRun] = []
        passed_at: int | None = None
        # a repair's prompt opens with the first attempt's: as in `adapld edit`, its prefill
        # is taken over (a fresh cache per task and method, so no first attempt gains by it)
        prefix = None if method in BASELINES else PrefixCache()
        attempts = Attempts(local, prep)
        kinds: list[str] = []
        verdicts: list[str] = []
        for attempt in attempts:
            kinds.append(_kind(attempt.prepared))
            timed = _Timed(self, local, method, prefix)
            started = time.perf_counter()
            generation = generate(timed, attempt.prepared)
            run = timed.run(generation, time.perf_counter() - started)
            runs.append(run)
            result = judge(attempt.prepared, generation, force=local.options.force)
            # an unchanged result is tested too: the tests fail on the original (a baseline
            # that fails, as `adapld edit --test` tells the model), or it passes
            tested = None
            if opts.test_feedback and task.tests and result.status is not Status.REFUSED:
                tested = testrun.run(result.new_text, task.tests, opts.test_timeout)
                if tested.passed:
                    passed_at = attempt.number
                    verdicts.append("passed")
                    attempts.record(result)
                    break
                refuse_failing(result, tested)
            verdicts.append(_verdict(result, tested))
            attempts.record(result)
        result = attempts.result
        joined = _joined(runs, result.stats)
        joined.extra["attempt_kinds"] = kinds
        joined.extra["attempt_results"] = verdicts
        return joined, attempts.first, result, passed_at

    def _measure(
        self,
        method: str,
        prompt_ids: list[int],
        config: Any,
        prefix: Any = None,
        reference: list[int] | None = None,
    ) -> MethodRun:
        model, tok = self.model_for(method), self.loaded.tokenizer
        memory.reset_peak()
        run = run_method(
            method, model, tok, prompt_ids, config, self.options.settings, self.workspaces,
            prefix, reference,
        )  # fmt: skip
        run.extra["peak_rss_mb"] = memory.peak_rss_mb()
        return run

    def _warmup(self, prep: Any) -> None:
        """One short generation per method: lazy initialisation, allocator, caches; then a
        static pass of every key span the generations' caches can reach (on a GPU: their
        graphs captured, so no task pays a capture the others do not)."""
        t0 = time.perf_counter()
        config = dataclasses.replace(
            prep.config, max_new_tokens=min(WARMUP_TOKENS, prep.config.max_new_tokens)
        )
        for method in self.options.methods:
            run_method(
                method,
                self.model_for(method),
                self.loaded.tokenizer,
                prep.prompt.ids,
                config,
                self.options.settings,
                self.workspaces,
            )
        self.workspaces.prepare()
        self.warmup_s = time.perf_counter() - t0


class _Timed:
    """A backend for one attempt that measures every generation it is asked for (one, or
    one per part of a plan) with :meth:`BenchRunner._measure`."""

    def __init__(self, runner: BenchRunner, local: Any, method: str, prefix: Any) -> None:
        self.runner, self.local, self.method, self.prefix = runner, local, method, prefix
        self.options, self.template, self.context = local.options, local.template, local.context
        self.runs: list[MethodRun] = []

    def generate(self, prepared: Any, on_event: Any = None) -> Any:
        # a repair's rejected answer is a draft source, as in `adapld edit`
        reference = self.local.reference_ids(prepared)
        run = self.runner._measure(
            self.method, prepared.prompt.ids, prepared.config, self.prefix, reference
        )
        self.runs.append(run)
        return self.local.generation(run.tokens, run.stats, run.stop_reason)

    def run(self, generation: Any, wall_s: float) -> MethodRun:
        """The attempt as one run. A whole-file prompt: its one generation's measure. A
        plan's: the parts' tokens, the generation's combined ``stats``, and ``wall_s``, the
        whole of it (the parts' prompts built, generated, spliced; a mechanical rename
        generates nothing and takes only that), the highest peak memory."""
        if generation.plan is None and len(self.runs) == 1:
            return self.runs[0]
        peaks = [r.extra["peak_rss_mb"] for r in self.runs if r.extra.get("peak_rss_mb")]
        return MethodRun(
            [t for r in self.runs for t in r.tokens],
            generation.stats,
            generation.stop_reason,
            wall_s,
            extra={"peak_rss_mb": max(peaks)} if peaks else {},
        )


def unrelated_changes(task: Task, new_text: str) -> list[str]:
    """The definitions and top-level statements ``new_text`` changes, adds or removes that
    ``task.touches`` does not list (``task.before`` is the original)."""
    from adapld_cli.edit.guard.scan import scan
    from adapld_cli.edit.syntax import changed_definitions

    if new_text == task.before:
        return []
    allowed = set(task.touches or ())
    changes = changed_definitions(task.before, new_text, "python")
    names = [*changes.changed, *changes.added, *changes.removed]
    names += [n for pair in changes.renamed for n in pair]
    old, new = scan(task.before, "python"), scan(new_text, "python")
    if old is not None and new is not None:
        texts = {(i.name, i.text) for i in new.items if i.kind not in ("function", "class")}
        names += [
            i.name
            for i in old.items
            if i.kind not in ("function", "class") and (i.name, i.text) not in texts
        ]
    return sorted({n for n in names if n not in allowed})


def _kind(prepared: Any) -> str:
    """What an attempt generates: the "whole" file, a "fix" of a failing result (its cause
    first, then the whole file), a first attempt's "plan" (parts), or a "repair" by parts."""
    plan, conv = prepared.plan, prepared.conversation
    if plan is None:
        return "fix" if conv is not None and conv.explain else "whole"
    return "repair" if plan.base is not None else "plan"


def _joined(runs: list[MethodRun], stats: Any) -> MethodRun:
    """Several attempts as one run: their tokens one after another (a ``-1`` between two
    attempts, so a method compares equal to ``ar`` only attempt by attempt), ``stats`` (the
    attempts' statistics added up), the last stop reason, the wall times added (each one's
    in ``extra["attempt_s"]``, where its time went in ``extra["attempt_stats"]``), the highest
    peak memory."""
    if len(runs) == 1:
        runs[0].extra["attempt_s"] = [runs[0].wall_s]
        runs[0].extra["attempt_stats"] = [_attempt_stats(runs[0].stats)]
        return runs[0]
    tokens: list[int] = []
    for i, run in enumerate(runs):
        tokens += ([-1] if i else []) + run.tokens
    peaks = [r.extra["peak_rss_mb"] for r in runs if r.extra.get("peak_rss_mb") is not None]
    extra: dict[str, Any] = {"peak_rss_mb": max(peaks)} if peaks else {}
    extra["attempt_s"] = [r.wall_s for r in runs]
    extra["attempt_stats"] = [_attempt_stats(r.stats) for r in runs]
    return MethodRun(tokens, stats, runs[-1].stop_reason, sum(r.wall_s for r in runs), extra=extra)


def _attempt_stats(stats: Any) -> dict[str, float]:
    """Where one attempt's time went: the prompt (its positions, those taken over from the
    prefix cache, the prefill's seconds) and the answer (its tokens, passes, seconds)."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "prefill_s": round(stats.prefill_s, 4),
        "new_tokens": stats.new_tokens,
        "forward_passes": stats.forward_passes,
        "decode_s": round(stats.decode_s, 4),
    }


def _save(folder: str, task: Task, method: str, text: str) -> None:
    from pathlib import Path

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    # a module's tasks share its file name: name their outputs by task
    stem = task.name if task.file else task.filename.removesuffix(".py")
    (out / f"{stem}.{method}.py").write_text(text, encoding="utf-8")


def _row(task: Task, method: str, run: MethodRun, result: Any, first: Any) -> dict[str, Any]:
    """One JSON-ready row: the run's statistics (:meth:`Stats.as_dict`) with end-to-end time
    (wall clock, not prefill + decode) and the fields filled in later (comparison, tests)."""
    wall = run.wall_s
    stats = run.stats.as_dict()
    return {
        "task": task.name,
        **stats,
        "method": method,
        "stop_reason": run.stop_reason,
        "status": result.status.value,
        "total_s": round(wall, 4),
        "prefill_s": round(run.stats.prefill_s, 4),
        "decode_s": round(run.stats.decode_s, 4),
        "tok_s": round(run.stats.new_tokens / wall, 3) if wall > 0 else 0.0,
        "speedup_vs_ar": None,
        "identical_to_ar": None,
        "first_diff": None,
        "peak_rss_mb": _round(run.extra.get("peak_rss_mb"), 1),
        "attempts": result.attempts,
        "attempt_s": [round(s, 4) for s in run.extra.get("attempt_s", [wall])],
        "attempt_stats": run.extra.get("attempt_stats", []),
        # each attempt's kind: "whole" file, a "plan"'s parts, a "repair" by parts
        "attempt_kinds": run.extra.get("attempt_kinds", []),
        # each attempt's verdict: "passed" (the tests), "changed", "unchanged", or
        # "refused: <why>" (a check's reason, or the tests' one-line summary)
        "attempt_results": run.extra.get("attempt_results", []),
        "first_status": first.status.value,
        "passed": None,
        "passed_first": None,
    }


def _verdict(result: Any, tested: Any) -> str:
    """One attempt's judged result in a line (the bench rows' ``attempt_results``): the
    check's reason, or the failing tests' summary."""
    why = f"tests failed ({tested.summary()})" if tested is not None else result.message or ""
    why = why.split("\n")[0][:200]
    return f"{result.status.value}: {why}" if why else result.status.value


def _compare(*, rows: list[dict[str, Any]], ar_row: dict[str, Any], ar_tokens: list[int]) -> None:
    """Fill ``identical_to_ar``, ``first_diff`` and ``speedup_vs_ar`` of ``rows`` against ar."""
    for row in rows:
        tokens = row.get("_tokens")
        if tokens is None:
            continue
        same = tokens == ar_tokens
        row["identical_to_ar"] = same
        if not same:
            n = min(len(tokens), len(ar_tokens))
            row["first_diff"] = next((i for i in range(n) if tokens[i] != ar_tokens[i]), n)
        ar_rate, rate = ar_row["tok_s"], row["tok_s"]
        row["speedup_vs_ar"] = round(rate / ar_rate, 4) if ar_rate > 0 and rate > 0 else None


def _round(value: float | None, digits: int) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value, digits)
