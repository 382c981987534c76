"""`adapld bench`: side-by-side speed of ar, transformers' generate (hf, hf-pld), PLD and AdaPLD.

Contract: this module only parses options and prints; the work is in :mod:`adapld_cli.bench`.
It loads the tasks first (bad input: one line on stderr, exit 2, no model loaded), then the
model once, then runs :class:`~adapld_cli.bench.BenchRunner`. Progress lines and the summary
table go to stderr; data files go where ``--json`` / ``--markdown`` / ``--plot`` say (``-`` =
stdout for JSON or Markdown, so stdout carries only data). ``--verify-cost`` prints the
per-n forward cost table on stdout and exits; ``--from-json`` runs nothing and reports on
earlier results. Exit codes: 0 done; 1 an output of the engine's methods (ar, pld, adapld and
its ablations) differed from ``ar`` on some task (a bug: they are lossless); 2 bad usage or
input; 130 interrupted (what was measured is still reported and written). A task's test
script that fails, times out or cannot start counts as not passed (pass@1), never as an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from adapld_cli.bench.methods import ABLATIONS, ALL_METHODS, DEFAULT_METHODS, VARIANTS
from adapld_cli.cli.app import app
from adapld_cli.cli.options import DeviceOpt, DtypeOpt, ModelOpt, ThreadsOpt, WeightsOpt

HELP = (
    "Measure decoding speed: plain decoding (ar), transformers' generate (hf) and prompt "
    "lookup (hf-pld) on the stock model, PLD and AdaPLD, on the prompts `adapld edit` builds."
    "\n\nEvery method runs on every task in one process, interleaved task by task after a "
    "warm-up. Reports tokens/s, speedup over ar (per task, median, geometric mean), forward "
    "passes F, mean accepted length T, drafting statistics, peak memory and whether each "
    "output is identical to ar (for ar, pld, adapld and its ablations it must be: anything "
    "else is a bug and exits 1)."
)
EPILOG = (
    f"Methods: {', '.join(m for m in ALL_METHODS if m not in ABLATIONS and m not in VARIANTS)}; "
    f"ablations {', '.join(ABLATIONS)}; variants {', '.join(VARIANTS)} (the semantic fallback, "
    "or every pass's top-K rows, forced on: by default on CUDA only; static passes, CUDA "
    "graphs on a GPU, forced on or off for ar and adapld: by default on CUDA only) "
    "('all' = every one).\n\n"
    "Examples:\n\n"
    "  adapld bench                                   (built-in suite, default methods)\n\n"
    "  adapld bench --tasks canitedit.jsonl --limit 20 --json out.json --plot out.png\n\n"
    "  adapld bench --methods ar,adapld,adapld-semantic,adapld-no-branches --json - > abl.json\n\n"
    "  adapld bench --verify-cost                     (cost of a pass over n tokens)\n\n"
    "Exit codes: 0 done · 1 an output differed from ar · 2 bad usage or input · 130 "
    "interrupted (partial results are still written)."
)


_D, _G, _O = "Tasks", "Generation", "Output"
_DEFAULTS = ",".join(DEFAULT_METHODS)
_HELPS = {
    "--tasks": "Task file (CanItEdit JSONL: before, instruction_descriptive, after, tests). "
    "Default: the built-in suite.",
    "--limit": "Run at most N tasks.",
    "--offset": "Skip the first N tasks.",
    "--task": "Only this task (full_name, name or id); repeatable.",
    "--instruction": "Which CanItEdit instruction: descriptive (default) or lazy.",
    "--run-tests": "Run each task's test script against every output (subprocess, timeout): "
    "pass@1 per method.",
    "--test-timeout": "Seconds per test script (default: 30).",
    "--test-feedback": "With --run-tests and --attempts N: the task's tests judge each changed "
    "result and a failing one is asked for again with their output, as `adapld edit --test`; "
    "reports pass@k with test feedback for k = 1..N (k = 1: plain pass@1).",
    "--methods": "Comma-separated methods, run in this order per task.",
    "--max-new-tokens": "Token limit per task. Default: as `adapld edit` (2 x file + 256).",
    "--prompt": "Prompt template, as `adapld edit --prompt`.",
    "--parts": "Also run each method as `adapld edit` edits a big file, rewriting only the "
    "parts its plan names (rows `<method>/parts`; a task without a plan repeats the whole-file "
    "row): time and tokens against the whole-file rewrite, and with a task's `touches` the "
    "results that change anything else (e.g. --tasks adapld_cli/bench/bigfiles.jsonl).",
    "--parts-only": "As --parts, without the whole-file rows.",
    "--attempts": "Generations per task and method, as `adapld edit --attempts` (a refused or "
    "unchanged result is asked for again with the reason); reports pass@1 of the first "
    "attempt and the last. Default: 1.",
    "--set": "Override an AdaPLD setting (e.g. node_budget=32); repeatable. With "
    "--verify-cost, graphs=true / graphs=false measures the static passes (CUDA graphs on a "
    "GPU) / the eager ones, uniform=false the static passes of nine sizes, planes=false a "
    "uniform pass without key planes, span=0 passes attending the whole cache; by default the "
    "device's (on CUDA: uniform, planes, span=512).",
    "--warmup/--no-warmup": "Warm every method up first.",
    "--verify-cost": "Run nothing else: print what one forward over n = 1..64 new tokens costs "
    "on a cache of --context tokens (ms, ratio to n = 1 and to the first context, median of 5; "
    "the attention kernel and the LM head alone) and the prefill rate; exit.",
    "--context": "--verify-cost's cache lengths, comma-separated (e.g. 1000,8000,16000).",
    "--json": "Write the JSON report ('-' = stdout).",
    "--markdown": "Write Markdown tables ('-' = stdout).",
    "--plot": "Write a PNG plot (speedup per task; accepted length).",
    "--save-outputs": "Write every edited file as DIR/<task>.<method>.py (for inspection).",
    "--from-json": "Run nothing: report on earlier --json results (repeatable; rows are "
    "merged, e.g. halves of one task list run in parallel).",
    "--quiet": "No progress lines.",
}


def _opt(name: str, panel: str, metavar: str = "", *short: str, **kw: Any) -> Any:
    """Option ``name`` with its help from ``_HELPS``, in ``panel``. Value options name a
    ``metavar``; flags show none (``""``)."""
    kw.setdefault("show_default", False)
    return typer.Option(
        name, *short, help=_HELPS[name], rich_help_panel=panel, metavar=metavar, **kw
    )


@dataclass(frozen=True)
class _Outputs:
    json_to: str | None
    markdown_to: str | None
    plot_to: Path | None
    quiet: bool


class _Usage(Exception):
    """Bad usage or input: one line on stderr, exit 2."""


@app.command(help=HELP, epilog=EPILOG)
def bench(
    tasks: Annotated[Path | None, _opt("--tasks", _D, "FILE")] = None,
    limit: Annotated[int | None, _opt("--limit", _D, "N", min=1)] = None,
    offset: Annotated[int, _opt("--offset", _D, "N", min=0, show_default=True)] = 0,
    task_names: Annotated[list[str] | None, _opt("--task", _D, "NAME")] = None,
    instruction: Annotated[str, _opt("--instruction", _D, "KIND")] = "descriptive",
    run_tests: Annotated[bool, _opt("--run-tests", _D)] = False,
    test_timeout: Annotated[float, _opt("--test-timeout", _D, "SECONDS", min=1.0)] = 30.0,
    test_feedback: Annotated[bool, _opt("--test-feedback", _D)] = False,
    methods: Annotated[str, _opt("--methods", _G, "LIST", show_default=True)] = _DEFAULTS,
    max_new_tokens: Annotated[int | None, _opt("--max-new-tokens", _G, "N", min=1)] = None,
    prompt: Annotated[str | None, _opt("--prompt", _G, "NAME|FILE")] = None,
    attempts: Annotated[int, _opt("--attempts", _G, "N", min=1)] = 1,
    parts: Annotated[bool, _opt("--parts", _G)] = False,
    parts_only: Annotated[bool, _opt("--parts-only", _G)] = False,
    adapld_set: Annotated[list[str] | None, _opt("--set", _G, "KEY=VALUE")] = None,
    warmup: Annotated[bool, _opt("--warmup/--no-warmup", _G, show_default=True)] = True,
    verify_cost: Annotated[bool, _opt("--verify-cost", _G)] = False,
    context: Annotated[str, _opt("--context", _G, "LIST", show_default=True)] = "1000",
    json_out: Annotated[str | None, _opt("--json", _O, "FILE")] = None,
    markdown_out: Annotated[str | None, _opt("--markdown", _O, "FILE")] = None,
    plot_out: Annotated[Path | None, _opt("--plot", _O, "FILE.png")] = None,
    save_outputs: Annotated[Path | None, _opt("--save-outputs", _O, "DIR")] = None,
    from_json: Annotated[list[Path] | None, _opt("--from-json", _O, "FILE")] = None,
    quiet: Annotated[bool, _opt("--quiet", _O, "", "-q")] = False,
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    weights: WeightsOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Benchmark decoding methods (help text: ``HELP`` above)."""
    from adapld_cli.bench import BenchError, BenchOptions, load_tasks, parse_methods
    from adapld_cli.edit import EditError
    from adapld_cli.model import ModelError
    from adapld_cli.ui import stderr_console

    console = stderr_console()
    out = _Outputs(json_out, markdown_out, plot_out, quiet)
    try:
        if json_out == "-" and markdown_out == "-":
            raise _Usage("only one of --json and --markdown can go to stdout ('-')")
        if test_feedback and not run_tests:
            raise _Usage("--test-feedback needs --run-tests")
        if from_json:
            code = _merged(console, from_json, out)
        elif verify_cost:
            settings = _settings(adapld_set or [])
            contexts = _contexts(context)
            code = _verify_cost(_load(model, device, dtype, threads, weights), settings, contexts)
        else:
            options = BenchOptions(
                methods=parse_methods(methods),
                max_new_tokens=max_new_tokens,
                run_tests=run_tests,
                test_timeout=test_timeout,
                template=_template(prompt),
                warmup=warmup,
                settings=_settings(adapld_set or []),
                save_outputs=str(save_outputs) if save_outputs else None,
                attempts=attempts,
                test_feedback=test_feedback,
                parts=parts or parts_only,
                whole=not parts_only,
            )
            task_list = load_tasks(
                tasks, instruction=instruction, limit=limit, offset=offset, names=task_names
            )
            if plot_out is not None:
                _check_plot()
            loaded = _load(model, device, dtype, threads, weights)
            code = _run(console, loaded, task_list, options, out, tasks, instruction)
    except (_Usage, BenchError, EditError, ModelError) as exc:
        _line(console, f"adapld: error: {exc}", "red")  # one line, never wrapped
        code = 2
    raise typer.Exit(code)


def _template(prompt: str | None) -> str | None:
    """The ``--prompt`` value, checked now (before any model loads)."""
    if prompt is not None:
        from adapld_cli.edit import load_template

        load_template(prompt)
    return prompt


def _settings(pairs: list[str]) -> Any:
    from adapld_cli.engine.settings import parse_overrides

    try:
        return parse_overrides(pairs) if pairs else None
    except ValueError as exc:
        raise _Usage(f"--set {exc}") from None


def _check_plot() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise _Usage("--plot needs matplotlib: pip install 'adapld[bench]'") from None


def _load(
    model: str | None, device: str | None, dtype: str, threads: int | None, weights: str | None
) -> Any:
    """Threads set, then the model loaded, as `adapld edit` does it."""
    from adapld_cli.edit.run import ModelConfig, load_model

    config = ModelConfig(spec=model, device=device, dtype=dtype, threads=threads, weights=weights)
    return load_model(config)[0]


def _contexts(text: str) -> tuple[int, ...]:
    """``--context``'s comma-separated cache lengths, checked before any model loads."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise _Usage(f"--context {text!r}: give cache lengths, e.g. 1000,8000")
    return values


def _verify_cost(loaded: Any, settings: Any = None, contexts: tuple[int, ...] = (1000,)) -> int:
    """Print the verify-cost curves (:func:`adapld_cli.bench.verify_cost.curve_for`), one per
    cache length, each pass's parts measured."""
    from adapld_cli.bench.verify_cost import curve_for

    try:
        text = curve_for(loaded, settings, contexts, parts=True)
    except ValueError as exc:  # a model with too few positions
        raise _Usage(f"--verify-cost: {exc}") from None
    typer.echo(text, nl=False)
    return 0


def _run(
    console: Any,
    loaded: Any,
    tasks: list,
    options: Any,
    out: _Outputs,
    tasks_file: Path | None,
    instruction: str,
) -> int:
    from adapld_cli.bench import BenchResults, BenchRunner, progress_line

    runner = BenchRunner(loaded, tasks, options)
    if not out.quiet:
        runner.on_row = lambda row, i, n: _line(console, progress_line(row, i, n))
        runner.on_skip = lambda name, why: _line(console, f"skipped {name}: {why}", "yellow")
        _line(
            console,
            f"adapld bench: {len(tasks)} tasks x {len(options.methods)} methods "
            f"({', '.join(options.methods)}) on {loaded.name} "
            f"[{loaded.device}, {loaded.dtype}, {loaded.weights_label()}]",
        )
    results = BenchResults.measure(
        runner,
        tasks_file=tasks_file,
        instruction=instruction,
        on_interrupt=lambda: _line(console, "interrupted: reporting what was measured", "yellow"),
    )
    return _report(console, results, out)


def _merged(console: Any, paths: list[Path], out: _Outputs) -> int:
    from adapld_cli.bench import BenchResults

    return _report(console, BenchResults.merge(paths), out)


def _report(console: Any, results: Any, out: _Outputs) -> int:
    """Print the tables and any differences from ar, write the files; the exit code."""
    from adapld_cli.bench import BenchError, rich_table

    doc = results.document()
    if doc["methods"]:
        console.print(rich_table(doc))
    try:
        results.write(doc, json_to=out.json_to, markdown_to=out.markdown_to, plot_to=out.plot_to)
    except (OSError, BenchError) as exc:
        raise _Usage(f"cannot write output: {exc}") from None
    for line in doc["baseline_differences"]:
        _line(console, f"note: {line} (a transformers baseline: not an adapld bug)", "yellow")
    for line in doc.get("graph_fallbacks", []):
        _line(console, f"note: {line}", "yellow")
    failing = sorted(t for t, ok in doc.get("reference_pass", {}).items() if not ok)
    if failing:
        names = ", ".join(failing[:4]) + (", ..." if len(failing) > 4 else "")
        _line(
            console,
            f"note: {len(failing)} task(s) cannot pass here: their reference solution fails "
            f"its tests ({names}); a missing package? `pip install 'adapld[bench]'` has what "
            "CanItEdit's tests import",
            "yellow",
        )
    for line in doc["problems"]:
        _line(console, f"ERROR: {line}", "bold red")
    if doc["problems"]:
        _line(
            console,
            f"ERROR: {len(doc['problems'])} output(s) differ from plain greedy decoding (ar): "
            "the decoding is not lossless there. This is a bug.",
            "bold red",
        )
    return results.exit_code(doc)


def _line(console: Any, text: str, style: str | None = None) -> None:
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)
