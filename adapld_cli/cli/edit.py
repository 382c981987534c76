"""`adapld edit`: rewrite files with the model, safely.

Contract: parses options, reads every input first (bad inputs are reported without loading
the model), loads the model once, runs an :class:`~adapld_cli.edit.EditSession` per file and
writes according to the output mode. stdout carries only data (edited file, diff); every
message goes to stderr. One file's failure does not stop the others; the exit code is the
worst one seen (0 done, 1 refused by a check or --check found changes, 2 bad usage or input,
130 interrupted: the file being generated is left untouched and the run stops).
"""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from adapld_cli.cli.app import app

# Plain text only: under NO_COLOR the app turns Rich markup off and tags would show literally.
HELP = (
    'Edit files with the model: adapld edit PATH... -i "what to change".\n\n'
    "The model rewrites each whole file; AdaPLD copies the unchanged parts from your file in "
    "large verified chunks, so this is several times faster than plain decoding and gives the "
    "same result. Writes are atomic and safe: nothing is written when generation is cut off "
    "or interrupted, or when the original parses and the result does not (see --force)."
)
EPILOG = (
    "Examples:\n\n"
    "  adapld edit app.py -i 'rename foo to bar'        (in place, like black)\n\n"
    "  adapld edit app.py -i 'add type hints' --diff    (print a diff, write nothing)\n\n"
    "  cat app.py | adapld edit - -i 'add docstrings' > out.py\n\n"
    "  adapld edit src/*.py -i 'use logging, not print' --check   (CI: exit 1 on changes)\n\n"
    "Exit codes: 0 done (edited or unchanged) · 1 refused by a check (truncated output, "
    "output that does not parse, --check found changes) · 2 bad usage or input (missing "
    "file, binary or non-UTF-8 file, empty instruction, file too long for the model) · "
    "130 interrupted (nothing written).\n\n"
    "The model is --model, else $ADAPLD_MODEL, else the embedded "
    "Qwen2.5-Coder-0.5B-Instruct. NO_COLOR turns colour off; the live panel is drawn only "
    "when stderr is a terminal (not in CI or pre-commit)."
)

_OUT = "Output"
_MODEL = "Model"
_GEN = "Generation"
_SHOW = "Display"


class Method(str, Enum):
    adapld = "adapld"
    pld = "pld"
    ar = "ar"


class UsageError(Exception):
    """Bad combination of options: message, exit 2."""


@app.command(help=HELP, epilog=EPILOG, no_args_is_help=True)
def edit(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH",
            help="Files to edit (in place by default). - reads stdin and writes the "
            "result to stdout.",
            show_default=False,
        ),
    ],
    instruction: Annotated[
        str | None,
        typer.Option(
            "--instruction", "-i", help="What to change, in plain words.", show_default=False
        ),
    ] = None,
    instruction_file: Annotated[
        Path | None,
        typer.Option(
            "--instruction-file", help="Read the instruction from a file.", show_default=False
        ),
    ] = None,
    to_stdout: Annotated[
        bool,
        typer.Option(
            "--stdout",
            help="Print the edited file to stdout; leave the file as is.",
            rich_help_panel=_OUT,
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the edited file here instead (one input).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Print a unified diff to stdout and write nothing. Hunk "
            "headers name the function or class they are in.",
            rich_help_panel=_OUT,
        ),
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing; exit 1 when any file would change and "
            "list those files (for CI). Combine with --diff to see the changes.",
            rich_help_panel=_OUT,
        ),
    ] = False,
    stats_json: Annotated[
        Path | None,
        typer.Option(
            "--stats-json",
            help="Write decoding statistics, one JSON object per "
            "line and file (method, new_tokens, forward_passes, mean_accepted, "
            "prefill_s, decode_s, total_s, drafting counters).",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Write even when the edited file does not parse "
            "(tree-sitter) although the original did.",
            rich_help_panel=_OUT,
        ),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="'embedded', a local model folder, a .gguf file or "
            "a hub id already in the cache. Default: $ADAPLD_MODEL, else 'embedded'.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="cpu, cuda, cuda:1, mps or auto. Default: the best available.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option("--dtype", help="auto, float32, bfloat16 or float16.", rich_help_panel=_MODEL),
    ] = "auto",
    method: Annotated[
        Method,
        typer.Option(
            "--method",
            help="adapld: speculative copying with semantic fallback "
            "(fastest); pld: plain prompt lookup; ar: plain decoding, one token per "
            "forward pass. All give the same output when greedy.",
            rich_help_panel=_GEN,
        ),
    ] = Method.adapld,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            min=1,
            help="Most tokens to generate per file. "
            "Default: twice the file's length + 256, within the model's context.",
            rich_help_panel=_GEN,
            show_default=False,
        ),
    ] = None,
    temperature: Annotated[
        float,
        typer.Option(
            "--temperature", min=0.0, help="0 = greedy (deterministic).", rich_help_panel=_GEN
        ),
    ] = 0.0,
    top_p: Annotated[
        float,
        typer.Option(
            "--top-p",
            min=0.0,
            max=1.0,
            help="Nucleus sampling (with --temperature > 0).",
            rich_help_panel=_GEN,
        ),
    ] = 1.0,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="Random seed for sampling.", rich_help_panel=_GEN, show_default=False
        ),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            help="Prompt template: a bundled name (default, minimal, strict) or a template file.",
            rich_help_panel=_GEN,
            show_default=False,
        ),
    ] = None,
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            "--stdin-filename",
            help="File name to assume for '-' (picks the "
            "language for the prompt and the syntax check).",
            rich_help_panel=_GEN,
            show_default=False,
        ),
    ] = None,
    no_live: Annotated[
        bool,
        typer.Option(
            "--no-live",
            help="No live panel; print one result line per file.",
            rich_help_panel=_SHOW,
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print errors only.", rich_help_panel=_SHOW),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also print model, prompt and budget details.",
            rich_help_panel=_SHOW,
        ),
    ] = False,
) -> None:
    """Edit files with the model (help text: ``HELP`` above)."""
    from adapld_cli.ui import stderr_console

    console = stderr_console()
    runner = _Run(console, quiet=quiet, verbose=verbose)
    try:
        code = runner.main(
            paths=paths,
            instruction=instruction,
            instruction_file=instruction_file,
            to_stdout=to_stdout,
            output=output,
            diff=diff,
            check=check,
            stats_json=stats_json,
            force=force,
            model=model,
            device=device,
            dtype=dtype,
            method=method.value,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            prompt=prompt,
            stdin_filename=stdin_filename,
            live=not no_live,
        )
    except UsageError as exc:
        runner.error(str(exc))
        code = 2
    raise typer.Exit(code)


class _Run:
    """State of one `adapld edit` invocation (kept out of the Typer function for clarity)."""

    def __init__(self, console: Any, *, quiet: bool, verbose: bool) -> None:
        self.console = console
        self.quiet = quiet
        self.verbose = verbose
        self.counts: dict[str, int] = {}
        self.worst = 0
        self.stats_fh: IO[str] | None = None
        self.show_diff = False

    # -- messages ------------------------------------------------------------------------
    def error(self, message: str) -> None:
        from adapld_cli.ui import emit

        emit(self.console, f"adapld: error: {message}", "error")

    def info(self, message: str) -> None:
        if self.verbose and not self.quiet:
            from adapld_cli.ui import emit

            emit(self.console, f"adapld: {message}")

    def record(
        self, name: str, status: str, code: int, *, detail: str = "", stats: Any = None
    ) -> None:
        """One file done: count it, print its line, remember the worst exit code."""
        from adapld_cli.ui import emit, file_line

        self.counts[status] = self.counts.get(status, 0) + 1
        self.worst = max(self.worst, code)
        if code >= 2 or status in ("refused", "interrupted") or not self.quiet:
            emit(self.console, file_line(name, status, detail=detail, stats=stats), status)

    def write_stats(self, name: str, status: str, result: Any = None, message: str = "") -> None:
        if self.stats_fh is None:
            return
        row: dict[str, Any] = {"path": name, "status": status}
        if result is not None:
            s = result.stats
            row.update(
                method=s.method,
                new_tokens=s.new_tokens,
                forward_passes=s.forward_passes,
                mean_accepted=round(s.mean_accepted, 4),
                prefill_s=round(s.prefill_s, 4),
                decode_s=round(s.decode_s, 4),
                total_s=round(s.total_s, 4),
                stop_reason=result.stop_reason,
            )
            for key, value in s.as_dict().items():
                row.setdefault(key, value)
        if message:
            row["message"] = message
        self.stats_fh.write(json.dumps(row) + "\n")
        self.stats_fh.flush()

    # -- the run -------------------------------------------------------------------------
    def main(
        self,
        *,
        paths: list[str],
        instruction: str | None,
        instruction_file: Path | None,
        to_stdout: bool,
        output: Path | None,
        diff: bool,
        check: bool,
        stats_json: Path | None,
        force: bool,
        model: str | None,
        device: str | None,
        dtype: str,
        method: str,
        max_new_tokens: int | None,
        temperature: float,
        top_p: float,
        seed: int | None,
        prompt: str | None,
        stdin_filename: str | None,
        live: bool,
    ) -> int:
        from adapld_cli.edit import EditError, EditOptions, load_template

        text = _instruction_text(instruction, instruction_file)
        use_stdin = "-" in paths
        if use_stdin and len(paths) > 1:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        if sum([to_stdout, output is not None, diff]) > 1:
            raise UsageError("choose one of --stdout, --output and --diff")
        if check and (to_stdout or output is not None):
            raise UsageError("--check writes nothing; it combines only with --diff")
        if output is not None and len(paths) != 1:
            raise UsageError("--output takes exactly one input path")
        self.show_diff = diff
        try:
            template = load_template(prompt)
        except EditError as exc:
            raise UsageError(str(exc)) from None
        if check:
            mode = "check"
        elif diff:
            mode = "diff"
        elif output is not None:
            mode = "output"
        elif to_stdout or use_stdin:
            mode = "stdout"
        else:
            mode = "inplace"

        if stats_json is not None:
            try:
                self.stats_fh = open(stats_json, "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise UsageError(f"--stats-json {stats_json}: {exc.strerror or exc}") from None
        try:
            inputs = self._read_inputs(paths, mode, output, stdin_filename)
            if not any(src is not None for _, src, _ in inputs):
                return self._finish(len(paths))
            loaded = self._load_model(model, device, dtype)
            if loaded is None:
                return self._finish(len(paths))
            options = EditOptions(
                method=method,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                force=force,
            )
            from adapld_cli.edit import EditSession

            session = EditSession(loaded, options, template)
            self.info(f"prompt template {template.name}; method {method}")
            for name, src, lang in inputs:
                if src is None:
                    continue
                if self._edit_one(session, name, src, lang, text, mode, output, live) == 130:
                    self.worst = 130
                    break
            return self._finish(len(paths))
        except KeyboardInterrupt:
            self.error("interrupted; nothing written")
            self.worst = 130
            return self._finish(len(paths))
        finally:
            if self.stats_fh is not None:
                self.stats_fh.close()

    def _finish(self, n_paths: int) -> int:
        from adapld_cli.ui import emit, run_summary

        if n_paths > 1 and not self.quiet:
            emit(self.console, run_summary(self.counts, self.worst))
        return self.worst

    def _read_inputs(
        self, paths: list[str], mode: str, output: Path | None, stdin_filename: str | None
    ) -> list[tuple[str, Any, str | None]]:
        """Read every input up front; failures are recorded and yield ``None``."""
        from adapld_cli.edit import EditError, check_writable, decode_source, read_source
        from adapld_cli.edit.syntax import language_for

        items: list[tuple[str, Any, str | None]] = []
        for p in paths:
            try:
                if p == "-":
                    name = stdin_filename or "<stdin>"
                    src = decode_source(sys.stdin.buffer.read(), name)
                    lang = language_for(stdin_filename)
                else:
                    name = p
                    src = read_source(p)
                    lang = None
                    if mode == "inplace":
                        check_writable(p)
                if mode == "output" and output is not None:
                    check_writable(output, str(output))
            except EditError as exc:
                self.record(
                    p if p != "-" else "<stdin>",
                    "error",
                    exc.exit_code,
                    detail=_strip_name(str(exc), p),
                )
                self.write_stats(p, "error", message=str(exc))
                items.append((p, None, None))
                continue
            items.append((name, src, lang))
        return items

    def _load_model(self, spec: str | None, device: str | None, dtype: str) -> Any:
        from adapld_cli.model import ModelError, load
        from adapld_cli.ui import plain_output

        started = time.perf_counter()
        try:
            loaded = load(
                spec,
                device=device,
                dtype=dtype,
                verbose=self.verbose,
                progress=False if self.quiet or plain_output() else None,
            )
        except ModelError as exc:
            self.error(str(exc))
            self.worst = max(self.worst, 2)
            return None
        self.info(
            f"model {loaded.name} ({loaded.source}) on {loaded.device}, {loaded.dtype}, "
            f"loaded in {time.perf_counter() - started:.1f}s"
        )
        return loaded

    def _edit_one(
        self,
        session: Any,
        name: str,
        src: Any,
        lang: str | None,
        instruction: str,
        mode: str,
        output: Path | None,
        live: bool,
    ) -> int:
        from adapld_cli.edit import EditError, atomic_write, unified_diff
        from adapld_cli.ui import LivePanel, live_wanted

        try:
            prepared = session.prepare(src, instruction, lang)
            self.info(
                f"{name}: {len(prepared.prompt.ids)} prompt tokens, "
                f"{prepared.source_tokens} file tokens, budget "
                f"{prepared.config.max_new_tokens}, context {prepared.context_limit}"
            )
            if live_wanted(self.console, no_live=not live, quiet=self.quiet):
                with LivePanel(
                    self.console,
                    session.loaded.tokenizer,
                    title=f"{name} · {session.options.method}",
                ) as panel:
                    result = session.run(prepared, panel.on_event)
            else:
                result = session.run(prepared)
        except EditError as exc:
            self.record(name, "error", exc.exit_code, detail=_strip_name(str(exc), name))
            self.write_stats(name, "error", message=str(exc))
            return exc.exit_code
        except KeyboardInterrupt:
            self.record(name, "interrupted", 130, detail="nothing written")
            self.write_stats(name, "interrupted")
            return 130
        except Exception as exc:  # engine/model failure on this file: report, go on
            if _is_engine_refusal(exc):
                self.record(name, "error", 2, detail=str(exc))
                self.write_stats(name, "error", message=str(exc))
                return 2
            raise

        detail = result.changes.describe() if result.changes else ""
        if result.status == "refused":
            self.record(name, "refused", 1, detail=result.message or "", stats=result.stats)
            self.write_stats(name, "refused", result, result.message or "")
            return 1
        changed = result.status == "changed"
        status, code = "unchanged", 0
        if mode == "check":
            status, code = ("would change", 1) if changed else ("unchanged", 0)
        elif mode in ("diff", "stdout"):
            status = "changed" if changed else "unchanged"
        elif mode == "output":
            status = "written"
            detail = f"to {output}" + (f"; {detail}" if detail else "")
        elif changed:
            status = "edited"
        if self.show_diff and changed:
            _write_stdout(unified_diff(src.text, result.new_text, name, result.lang).encode())
        if mode == "stdout":
            _write_stdout(result.new_bytes)
        elif mode == "output" and output is not None:
            try:
                keep = output.exists()  # an existing target keeps its own mode bits
                atomic_write(output, result.new_bytes, mode=None if keep else _mode_of(src))
            except OSError as exc:
                self.record(name, "error", 2, detail=f"cannot write {output}: {exc.strerror}")
                return 2
        elif mode == "inplace" and changed:
            try:
                atomic_write(src.path, result.new_bytes)
            except OSError as exc:
                self.record(name, "error", 2, detail=f"cannot write: {exc.strerror or exc}")
                return 2
        if result.syntax_error is not None:
            detail = (detail + "; " if detail else "") + (
                f"--force: kept despite a syntax error ({result.syntax_error})"
            )
        self.record(name, status, code, detail=detail, stats=result.stats)
        self.write_stats(name, status, result)
        return code


def _mode_of(src: Any) -> int | None:
    import stat

    if src.path is None:
        return None
    try:
        return stat.S_IMODE(src.path.stat().st_mode)
    except OSError:
        return None


def _write_stdout(data: bytes) -> None:
    if not data:
        return
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(data)
        out.flush()
    else:  # a text-only stream (some test harnesses)
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))
        sys.stdout.flush()


def _instruction_text(instruction: str | None, instruction_file: Path | None) -> str:
    if instruction is not None and instruction_file is not None:
        raise UsageError("give the instruction with -i or --instruction-file, not both")
    if instruction_file is not None:
        try:
            instruction = instruction_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--instruction-file {instruction_file}: {exc}") from None
    if instruction is None:
        raise UsageError("missing the instruction: -i 'what to change' (or --instruction-file)")
    if not instruction.strip():
        raise UsageError("empty instruction: say what to change with -i TEXT")
    return instruction.strip()


def _strip_name(message: str, name: str) -> str:
    """Messages from the edit layer start with ``name: ``; the result line adds it already."""
    prefix = f"{name}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def _is_engine_refusal(exc: Exception) -> bool:
    """Model/engine errors that mean 'this model cannot do that' rather than a bug."""
    return type(exc).__name__ in ("UnsupportedModelError", "ModelError")
