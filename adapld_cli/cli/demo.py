"""`adapld demo`: edit a bundled sample file with the live panel, for a first look or a
terminal recording.

Contract: the sample (``adapld_cli/data/inventory.py``) is read, never modified; the edited
version's unified diff goes to stdout, everything else to stderr. ``--compare`` first runs
plain decoding (``ar``) on the same prompt, so the speedup on screen is measured; it also
reports whether both runs produced the same file (they must, when greedy). Exit codes as
`adapld edit`: 0 done, 1 the result was refused by a check, 2 bad input or model, 130
interrupted.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from adapld_cli.cli.app import app

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


@app.command(help=_HELP, epilog=_EPILOG)
def demo(
    compare: Annotated[
        bool,
        typer.Option(
            "--compare", help="Run plain decoding first so the speedup shown is measured."
        ),
    ] = False,
    instruction: Annotated[
        str, typer.Option("--instruction", "-i", help="What to change in the sample.")
    ] = INSTRUCTION,
    method: Annotated[
        str, typer.Option("--method", help="Decoding method to show: adapld or pld.")
    ] = "adapld",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model to use. Default: $ADAPLD_MODEL, else the embedded one.",
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", help="cpu, cuda, mps or auto.", show_default=False),
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="auto, float32, bfloat16, float16.")] = (
        "auto"
    ),
    no_live: Annotated[
        bool, typer.Option("--no-live", help="Plain result lines instead of the panel.")
    ] = False,
) -> None:
    """Run the demo (help text: ``_HELP`` above)."""
    from adapld_cli.ui import emit, stderr_console

    console = stderr_console()
    if method not in ("adapld", "pld"):
        emit(console, "adapld: error: --method must be adapld or pld", "error")
        raise typer.Exit(2)
    try:
        code = _run(console, compare, instruction, method, model, device, dtype, not no_live)
    except KeyboardInterrupt:
        emit(console, "adapld: error: interrupted", "error")
        code = 130
    raise typer.Exit(code)


def sample_source() -> Any:
    """The bundled sample as a :class:`~adapld_cli.edit.SourceFile` (read-only)."""
    import importlib.resources

    from adapld_cli.edit import decode_source

    raw = (importlib.resources.files("adapld_cli.data") / SAMPLE).read_bytes()
    return decode_source(raw, SAMPLE)


def _run(
    console: Any,
    compare: bool,
    instruction: str,
    method: str,
    model: str | None,
    device: str | None,
    dtype: str,
    live: bool,
) -> int:
    from adapld_cli.edit import EditError, unified_diff
    from adapld_cli.model import ModelError, load
    from adapld_cli.ui import emit, file_line

    try:
        loaded = load(model, device=device, dtype=dtype, progress=None)
    except ModelError as exc:
        emit(console, f"adapld: error: {exc}", "error")
        return 2
    source = sample_source()
    emit(console, f"adapld demo: {loaded.name} on {loaded.device} ({loaded.dtype})")
    emit(console, f"instruction: {instruction}")
    baseline = None
    plain_result = None
    try:
        if compare:
            plain_result = _one(console, loaded, source, instruction, "ar", None, live)
            baseline = plain_result.stats.decode_tok_s or None
        result = _one(console, loaded, source, instruction, method, baseline, live)
    except EditError as exc:
        emit(console, f"adapld: error: {exc}", "error")
        return exc.exit_code
    status = {"changed": "edited", "unchanged": "unchanged", "refused": "refused"}[result.status]
    detail = result.message or (result.changes.describe() if result.changes else "")
    emit(
        console,
        file_line(SAMPLE, status, detail=detail, stats=result.stats, baseline_tok_s=baseline),
        status,
    )
    if plain_result is not None:
        same = plain_result.tokens == result.tokens
        p, a = plain_result.stats, result.stats
        speed = p.decode_s / a.decode_s if a.decode_s > 0 else 0.0
        emit(
            console,
            f"plain decoding {p.decode_s:.1f}s ({p.forward_passes} passes) vs {method} "
            f"{a.decode_s:.1f}s ({a.forward_passes} passes): {speed:.1f}x measured; "
            f"same output: {'yes' if same else 'NO'}",
        )
    if result.status != "refused":
        patch = unified_diff(source.text, result.new_text, SAMPLE, result.lang)
        if patch:
            typer.echo(patch, nl=False)
    return result.exit_code


def _one(
    console: Any,
    loaded: Any,
    source: Any,
    instruction: str,
    method: str,
    baseline: float | None,
    live: bool,
) -> Any:
    from adapld_cli.edit import EditOptions, EditSession
    from adapld_cli.ui import LivePanel, live_wanted

    session = EditSession(loaded, EditOptions(method=method))
    prepared = session.prepare(source, instruction)
    if not live_wanted(console, no_live=not live):
        return session.run(prepared)
    title = f"{SAMPLE} · {'plain decoding (ar)' if method == 'ar' else method}"
    with LivePanel(
        console, loaded.tokenizer, title=title, baseline_tok_s=baseline, transient=False
    ) as panel:
        return session.run(prepared, panel.on_event)
