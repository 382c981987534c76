"""`adapld bench`: side-by-side speed of ar, hf-pld, pld, AdaPLD and its ablations.

Contract: loads the tasks first (bad input: one line on stderr, exit 2, no model loaded),
then the model once, then runs :class:`~adapld_cli.bench.BenchRunner`. Progress lines and the
summary table go to stderr; data files go where ``--json`` / ``--markdown`` / ``--plot`` say
(``-`` = stdout for JSON or Markdown, so stdout carries only data). Exit codes: 0 done; 1 a
greedy method's output differed from ``ar`` on some task (a bug: every method is lossless) or
a test failed to run; 2 bad usage or input; 130 interrupted (what was measured is still
reported and written).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from adapld_cli.cli.app import app

HELP = (
    "Measure decoding speed: plain decoding (ar), transformers' prompt lookup (hf-pld), "
    "PLD and AdaPLD, on the prompts `adapld edit` builds.\n\n"
    "Every method runs on every task in one process, interleaved task by task after a "
    "warm-up. Reports tokens/s, speedup over ar (per task, median, geometric mean), forward "
    "passes F, mean accepted length T, drafting statistics, peak memory and whether each "
    "output is identical to ar (it must be: anything else is a bug and exits 1)."
)
EPILOG = (
    "Methods: ar, hf-pld, pld, adapld, and ablations adapld-no-semantic, adapld-no-branches, "
    "adapld-no-cursor, adapld-no-rerank, adapld-no-adaptive ('all' = every one).\n\n"
    "Examples:\n\n"
    "  adapld bench                                   (built-in suite, default methods)\n\n"
    "  adapld bench --tasks canitedit.jsonl --limit 20 --json out.json --plot out.png\n\n"
    "  adapld bench --methods ar,adapld,adapld-no-semantic --json - > ablation.json\n\n"
    "Exit codes: 0 done · 1 an output differed from ar · 2 bad usage or input · 130 "
    "interrupted (partial results are still written)."
)

_DATA = "Tasks"
_OUT = "Output"
_MODEL = "Model"
_GEN = "Generation"


class _Usage(Exception):
    pass


@app.command(help=HELP, epilog=EPILOG)
def bench(
    tasks: Annotated[
        Path | None,
        typer.Option(
            "--tasks",
            help="Task file (CanItEdit JSONL: before, instruction_descriptive, after, tests). "
            "Default: the built-in suite.",
            rich_help_panel=_DATA,
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="Run at most N tasks.", rich_help_panel=_DATA, show_default=False
        ),
    ] = None,
    offset: Annotated[
        int,
        typer.Option("--offset", min=0, help="Skip the first N tasks.", rich_help_panel=_DATA),
    ] = 0,
    task_names: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            help="Only this task (full_name, name or id); repeatable.",
            rich_help_panel=_DATA,
            show_default=False,
        ),
    ] = None,
    instruction: Annotated[
        str,
        typer.Option(
            "--instruction",
            help="Which CanItEdit instruction: descriptive or lazy.",
            rich_help_panel=_DATA,
        ),
    ] = "descriptive",
    methods: Annotated[
        str,
        typer.Option(
            "--methods",
            help="Comma-separated methods, run in this order per task.",
            rich_help_panel=_GEN,
        ),
    ] = "ar,hf-pld,pld,adapld",
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            min=1,
            help="Token limit per task. Default: as `adapld edit` (2 x file + 256).",
            show_default=False,
            rich_help_panel=_GEN,
        ),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            help="Prompt template, as `adapld edit --prompt`.",
            show_default=False,
            rich_help_panel=_GEN,
        ),
    ] = None,
    adapld_set: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Override an AdaPLD setting (e.g. node_budget=32); repeatable.",
            show_default=False,
            rich_help_panel=_GEN,
        ),
    ] = None,
    run_tests: Annotated[
        bool,
        typer.Option(
            "--run-tests",
            help="Run each task's test script against every output "
            "(subprocess, timeout): pass@1 per method.",
            rich_help_panel=_DATA,
        ),
    ] = False,
    test_timeout: Annotated[
        float,
        typer.Option(
            "--test-timeout", min=1.0, help="Seconds per test script.", rich_help_panel=_DATA
        ),
    ] = 30.0,
    warmup: Annotated[
        bool,
        typer.Option(
            "--warmup/--no-warmup", help="Warm every method up first.", rich_help_panel=_GEN
        ),
    ] = True,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            metavar="FILE",
            help="Write the JSON report ('-' = stdout).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    markdown_out: Annotated[
        str | None,
        typer.Option(
            "--markdown",
            metavar="FILE",
            help="Write Markdown tables ('-' = stdout).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    plot_out: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="FILE.png",
            help="Write a PNG plot (speedup per task; accepted length).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    save_outputs: Annotated[
        Path | None,
        typer.Option(
            "--save-outputs",
            metavar="DIR",
            help="Write every edited file as DIR/<task>.<method>.py (for inspection).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    from_json: Annotated[
        list[Path] | None,
        typer.Option(
            "--from-json",
            metavar="FILE",
            help="Run nothing: report on earlier --json results (repeatable; rows are "
            "merged, e.g. halves of one task list run in parallel).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress lines.", rich_help_panel=_OUT)
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="'embedded', a local model folder, a .gguf file or "
            "a cached hub id. Default: $ADAPLD_MODEL, else 'embedded'.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="cpu, cuda, cuda:N, mps or auto.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="torch CPU threads (default: torch's choice). One thread can be faster on a "
            "machine shared with other jobs.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option("--dtype", help="auto, float32, bfloat16, float16.", rich_help_panel=_MODEL),
    ] = "auto",
) -> None:
    """Benchmark decoding methods (help text: ``HELP`` above)."""
    from adapld_cli.ui import stderr_console

    console = stderr_console()
    try:
        code = _main(
            console,
            tasks=tasks,
            limit=limit,
            offset=offset,
            task_names=task_names,
            instruction=instruction,
            methods=methods,
            max_new_tokens=max_new_tokens,
            prompt=prompt,
            adapld_set=adapld_set or [],
            run_tests=run_tests,
            test_timeout=test_timeout,
            warmup=warmup,
            json_out=json_out,
            markdown_out=markdown_out,
            plot_out=plot_out,
            quiet=quiet,
            model=model,
            device=device,
            dtype=dtype,
            threads=threads,
            save_outputs=save_outputs,
            from_json=from_json or [],
        )
    except _Usage as exc:
        console.print(f"adapld: error: {exc}", style="red", markup=False, highlight=False)
        code = 2
    raise typer.Exit(code)


def _main(console: Any, **o: Any) -> int:
    from adapld_cli.bench import BenchError, BenchOptions, BenchRunner, load_tasks, parse_methods
    from adapld_cli.edit import EditError, load_template

    if o["json_out"] == "-" and o["markdown_out"] == "-":
        raise _Usage("only one of --json and --markdown can go to stdout ('-')")
    if o["from_json"]:
        return _from_json(console, o)
    try:
        methods = parse_methods(o["methods"])
        tasks = load_tasks(
            o["tasks"],
            instruction=o["instruction"],
            limit=o["limit"],
            offset=o["offset"],
            names=o["task_names"],
        )
        settings = _settings(o["adapld_set"])
        if o["prompt"] is not None:
            load_template(o["prompt"])
    except (BenchError, EditError) as exc:
        raise _Usage(str(exc)) from None
    if o["plot_out"] is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _Usage("--plot needs matplotlib: pip install 'adapld[bench]'") from None

    from adapld_cli.model import ModelError, load

    if o["threads"]:
        import torch

        torch.set_num_threads(o["threads"])
    try:
        loaded = load(o["model"], device=o["device"], dtype=o["dtype"])
    except ModelError as exc:
        raise _Usage(str(exc)) from None
    options = BenchOptions(
        methods=methods,
        max_new_tokens=o["max_new_tokens"],
        run_tests=o["run_tests"],
        test_timeout=o["test_timeout"],
        template=o["prompt"],
        warmup=o["warmup"],
        settings=settings,
        save_outputs=str(o["save_outputs"]) if o["save_outputs"] else None,
    )
    runner = BenchRunner(loaded, tasks, options)
    if not o["quiet"]:
        runner.on_row = lambda row, i, n: console.print(
            _progress(row, i, n), highlight=False, markup=False, soft_wrap=True
        )
        runner.on_skip = lambda name, why: console.print(
            f"skipped {name}: {why}", style="yellow", markup=False
        )
        console.print(
            f"adapld bench: {len(tasks)} tasks x {len(methods)} methods "
            f"({', '.join(methods)}) on {loaded.name} [{loaded.device}, {loaded.dtype}]",
            markup=False,
            highlight=False,
        )
    started = time.time()
    o["load_start"] = _loadavg()
    interrupted = False
    try:
        runner.run()
    except KeyboardInterrupt:
        interrupted = True
        console.print("interrupted: reporting what was measured", style="yellow")
    meta = _meta(loaded, tasks, options, o, started, runner)
    return _report(console, runner, meta, methods, o, interrupted)


def _settings(pairs: list[str]) -> Any:
    from adapld_cli.bench import BenchError
    from adapld_cli.engine import AdaPLDSettings

    base = AdaPLDSettings()
    if not pairs:
        return None
    fields = {f.name: f for f in dataclasses.fields(AdaPLDSettings)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in fields:
            raise BenchError(f"--set {pair}: expected KEY=VALUE with KEY in {', '.join(fields)}")
        current = getattr(base, key)
        try:
            if isinstance(current, bool):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                changes[key] = value.lower() in ("true", "1", "yes")
            elif current is None or isinstance(current, int):
                changes[key] = None if value.lower() == "none" else int(value)
            else:
                changes[key] = type(current)(value)
        except ValueError:
            raise BenchError(f"--set {pair}: bad value for {key}") from None
    return dataclasses.replace(base, **changes)


def _progress(row: dict[str, Any], i: int, n: int) -> str:
    sp = f" {row['speedup_vs_ar']:.2f}x" if row["speedup_vs_ar"] else ""
    same = {True: "", False: "  DIFFERS FROM AR", None: ""}[row["identical_to_ar"]]
    ok = {True: " pass", False: " fail", None: ""}[row["passed"]]
    return (
        f"[{i}/{n}] {row['task']} {row['method']}: {row['new_tokens']} tok "
        f"{row['total_s']:.1f}s {row['tok_s']:.1f} tok/s F={row['forward_passes']} "
        f"T={row['mean_accepted']:.2f}{sp}{ok}{same}"
    )


def _meta(loaded: Any, tasks: list, options: Any, o: dict, started: float, runner: Any) -> dict:
    import os
    import platform

    import torch
    import transformers

    from adapld_cli import __version__
    from adapld_cli.bench import builtin_tasks_path

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    settings = options.settings
    if settings is None:
        from adapld_cli.engine import AdaPLDSettings

        settings = AdaPLDSettings()
    return {
        "command": "adapld " + " ".join(sys.argv[1:]) if sys.argv else "adapld bench",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "warmup_s": round(runner.warmup_s, 2),
        "adapld_version": __version__,
        "git": _git_state(),
        "model": loaded.name,
        "model_source": loaded.source,
        "device": loaded.device,
        "dtype": loaded.dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_average_end": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tasks_file": str(o["tasks"] or builtin_tasks_path()),
        "n_tasks": len(tasks),
        "instruction": o["instruction"],
        "methods": options.methods,
        "max_new_tokens": options.max_new_tokens,
        "prompt_template": options.template or "default",
        "adapld_settings": dataclasses.asdict(settings),
        "peak_rss_per_run": _per_run(),
    }


def _git_state() -> str | None:
    """``<commit>[+dirty]`` of the source tree adapld runs from, when it is a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit or None


def _loadavg() -> list[float] | None:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _per_run() -> bool:
    from adapld_cli.bench import memory

    return memory.per_run


def _from_json(console: Any, o: dict) -> int:
    """Merge the rows of earlier reports and report on them as if just measured."""
    from types import SimpleNamespace

    rows: list[dict] = []
    skipped: list = []
    reference: dict = {}
    methods: list[str] = []
    metas: list[dict] = []
    for path in o["from_json"]:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
            part, meta = doc["tasks"], doc.get("meta", {})
            methods += [m for m in doc["methods"] if m not in methods]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _Usage(f"--from-json {path}: not a bench report ({exc})") from None
        seen = {(r["task"], r["method"]) for r in rows}
        if any((r["task"], r["method"]) in seen for r in part):
            raise _Usage(f"--from-json {path}: repeats a (task, method) already loaded")
        rows += part
        skipped += doc.get("skipped", [])
        reference.update(doc.get("reference_pass", {}))
        metas.append(meta)
    meta = dict(metas[0])
    meta["n_tasks"] = len({r["task"] for r in rows})
    meta["merged_from"] = [
        {"file": str(p), "command": m.get("command"), "git": m.get("git")}
        for p, m in zip(o["from_json"], metas, strict=True)
    ]
    runner = SimpleNamespace(rows=rows, skipped=skipped, reference_pass=reference)
    return _report(console, runner, meta, methods, o, interrupted=False)


def _report(
    console: Any, runner: Any, meta: dict, methods: list[str], o: dict, interrupted: bool
) -> int:
    from adapld_cli.bench import BenchError, document, markdown, rich_table, write_plot

    doc = document(meta, runner.rows, methods, runner.skipped, runner.reference_pass)
    doc["meta"]["interrupted"] = interrupted or bool(meta.get("interrupted"))
    if doc["methods"]:
        console.print(rich_table(doc))
    try:
        if o["json_out"] is not None:
            _write(o["json_out"], json.dumps(doc, indent=2) + "\n")
        if o["markdown_out"] is not None:
            _write(o["markdown_out"], markdown(doc))
        if o["plot_out"] is not None and doc["tasks"]:
            write_plot(doc, o["plot_out"])
    except (OSError, BenchError) as exc:
        raise _Usage(f"cannot write output: {exc}") from None
    for line in doc["problems"]:
        console.print(f"ERROR: {line}", style="bold red", markup=False, highlight=False)
    if doc["problems"]:
        console.print(
            f"ERROR: {len(doc['problems'])} output(s) differ from plain greedy decoding (ar): "
            "the decoding is not lossless there. This is a bug.",
            style="bold red",
            markup=False,
            highlight=False,
        )
    if interrupted:
        return 130
    return 1 if doc["problems"] else 0


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(target).write_text(text, encoding="utf-8")
