"""`adapld demo`: edit a bundled sample file with the live panel, for a first look or a
terminal recording.

Contract: the sample (``adapld_cli/data/inventory.py``) is read, never modified; the edited
version's unified diff goes to stdout, everything else to stderr. ``--compare`` first runs
plain decoding (``ar``) on the same prompt, so the speedup on screen is measured; it also
reports whether both runs produced the same file (they must, when greedy). The result is
applied like ``adapld edit --diff`` (same statuses and exit codes: 0 done, 1 refused by a
check, 2 bad input or model, 130 interrupted, 143 terminated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from adapld_cli.cli.app import app
from adapld_cli.cli.helpfmt import PlainHelpCommand
from adapld_cli.cli.options import DeviceOpt, DtypeOpt, ModelOpt, ThreadsOpt, WeightsOpt
from adapld_cli.engine.methods import Method

if TYPE_CHECKING:
    from adapld_cli.edit import EditResult, SourceFile
    from adapld_cli.edit.run import ModelConfig
    from adapld_cli.ui import ConsoleView

SAMPLE = "inventory.py"
INSTRUCTION = "Rename the method total_value to value in both classes and update every call to it."

_HELP = (
    "Watch adapld edit a bundled sample file with the embedded model.\n\n"
    "The live panel colours each token by where it came from: green = copied from the file "
    "(lexical draft), magenta = semantic fallback, yellow = a draft-tree branch, plain = the "
    "model's own token. The footer shows tokens, forward passes, mean accepted tokens per pass "
    "(T), tokens/s and the speedup. The sample is never modified; the diff is printed to "
    "stdout."
)
_EPILOG = (
    "Examples:\n\n"
    "  adapld demo               (estimated speedup)\n\n"
    "  adapld demo --compare     (plain decoding first: the speedup shown is measured)"
)


@app.command(help=_HELP, epilog=_EPILOG, cls=PlainHelpCommand)
def demo(
    compare: Annotated[
        bool,
        typer.Option(
            "--compare", help="Run plain decoding first so the speedup shown is measured."
        ),
    ] = False,
    instruction: Annotated[
        str,
        typer.Option("--instruction", "-i", metavar="TEXT", help="What to change in the sample."),
    ] = INSTRUCTION,
    method: Annotated[
        Method,
        typer.Option(
            "--method", metavar="[adapld|pld]", help="Decoding method to show: adapld or pld."
        ),
    ] = Method.adapld,
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    weights: WeightsOpt = None,
    threads: ThreadsOpt = None,
    no_live: Annotated[
        bool, typer.Option("--no-live", help="Plain result lines instead of the panel.")
    ] = False,
) -> None:
    """Run the demo (help text: ``_HELP`` above)."""
    from adapld_cli.edit.interrupt import Signals
    from adapld_cli.edit.run import ModelConfig
    from adapld_cli.ui import ConsoleView, stderr_console

    view = ConsoleView(stderr_console(), live=not no_live)
    if method is Method.ar:
        view.error("--method must be adapld or pld")
        raise typer.Exit(2)
    config = ModelConfig(spec=model, device=device, dtype=dtype, threads=threads, weights=weights)
    with Signals():
        code = _run(view, config, instruction, method.value, compare)
    raise typer.Exit(code)


def sample_source() -> SourceFile:
    """The bundled sample as a :class:`~adapld_cli.edit.SourceFile` (read-only)."""
    import importlib.resources

    from adapld_cli.edit import decode_source

    raw = (importlib.resources.files("adapld_cli.data") / SAMPLE).read_bytes()
    return decode_source(raw, SAMPLE)


def _run(
    view: ConsoleView, config: ModelConfig, instruction: str, method: str, compare: bool
) -> int:
    """Load, generate (plain decoding first with ``compare``), show; return the exit code."""
    from adapld_cli.edit import EditError
    from adapld_cli.edit.interrupt import describe, exit_code_of
    from adapld_cli.edit.outcome import RunReport
    from adapld_cli.edit.run import load_model
    from adapld_cli.edit.writeback import Mode, WriteBack, apply_result
    from adapld_cli.model import ModelError

    report = RunReport()
    try:
        loaded, _threads = load_model(config)
        source = sample_source()
        view.note(f"adapld demo: {loaded.name} on {loaded.device} ({loaded.dtype})")
        view.note(f"instruction: {instruction}")
        plain = _one(view, loaded, source, instruction, "ar", None) if compare else None
        baseline = (plain.stats.decode_tok_s or None) if plain is not None else None
        result = _one(view, loaded, source, instruction, method, baseline)
    except (ModelError, EditError) as exc:
        view.error(str(exc))
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt as exc:
        view.error(describe(exc))
        return exit_code_of(exc)
    outcome = apply_result(result, WriteBack(Mode.DIFF, diff=True), name=SAMPLE)
    report.add(outcome)
    view.outcome(outcome, baseline_tok_s=baseline)
    if plain is not None:
        view.note(_comparison(plain, result, method))
    view.data(outcome.data)
    return report.exit_code


def _one(
    view: ConsoleView,
    loaded: Any,
    source: SourceFile,
    instruction: str,
    method: str,
    baseline: float | None,
) -> EditResult:
    """One generation on the sample, under the live panel when wanted."""
    from adapld_cli.edit import EditOptions, LocalModel, judge, prepare

    local = LocalModel(loaded, EditOptions(method=method))
    prepared = prepare(local, source, instruction)
    shown = "plain decoding (ar)" if method == "ar" else method
    with view.generating(
        SAMPLE, loaded.tokenizer, shown, baseline_tok_s=baseline, transient=False
    ) as panel:
        generation = local.generate(prepared, panel)
    return judge(prepared, generation)


def _comparison(plain: EditResult, result: EditResult, method: str) -> str:
    """``plain decoding {s}s ({n} passes) vs adapld {s}s ({n} passes): {r}x measured; ...``."""
    p, a = plain.stats, result.stats
    speed = p.decode_s / a.decode_s if a.decode_s > 0 else 0.0
    same = "yes" if plain.tokens == result.tokens else "NO"
    return (
        f"plain decoding {p.decode_s:.1f}s ({p.forward_passes} passes) vs {method} "
        f"{a.decode_s:.1f}s ({a.forward_passes} passes): {speed:.1f}x measured; "
        f"same output: {same}"
    )
