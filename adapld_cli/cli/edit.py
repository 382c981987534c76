"""`adapld edit`: rewrite files with the model, safely.

Contract: parses the options into one typed :class:`~adapld_cli.edit.run.EditConfig` (a bad
combination is exit 2 before anything is read) and hands it to
:func:`~adapld_cli.edit.run.run_edit` with a console view; SIGINT and SIGTERM are handled for
the whole run. What happens to each result (write-back mode, statuses, exit codes) is the edit
layer's business: see ``adapld_cli/edit/writeback.py`` and ``adapld_cli/edit/outcome.py``.
stdout carries only data (edited file, diff); every message goes to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from adapld_cli.cli.app import app
from adapld_cli.cli.edit_options import (
    AttemptsOpt,
    CheckOpt,
    DiffOpt,
    ForceOpt,
    InstructionFileOpt,
    InstructionOpt,
    KeepFailingOpt,
    MaxNewTokensOpt,
    MethodOpt,
    NoLiveOpt,
    OutputOpt,
    PathsArg,
    PromptOpt,
    QuietOpt,
    SeedOpt,
    ServerOpt,
    StatsJsonOpt,
    StdinFilenameOpt,
    StdoutOpt,
    TemperatureOpt,
    TestOpt,
    TestTimeoutOpt,
    TopPOpt,
    VerboseOpt,
    WholeFileOpt,
)
from adapld_cli.cli.helpfmt import PlainHelpCommand
from adapld_cli.cli.options import DeviceOpt, DtypeOpt, ModelOpt, ThreadsOpt, WeightsOpt
from adapld_cli.edit.request import DEFAULT_ATTEMPTS
from adapld_cli.edit.testcmd import DEFAULT_TIMEOUT_S
from adapld_cli.engine.methods import Method

if TYPE_CHECKING:
    from adapld_cli.edit.prompt import PromptTemplate
    from adapld_cli.edit.testcmd import TestConfig
    from adapld_cli.edit.writeback import WriteBack

# Plain text only: under NO_COLOR the app turns Rich markup off and tags would show literally.
HELP = (
    'Edit files with the model: adapld edit PATH... -i "what to change".\n\n'
    "The model rewrites each whole file; AdaPLD copies the unchanged parts from your file in "
    "large verified chunks, so this is several times faster than plain decoding and gives the "
    "same result. Writes are atomic, keep the file's owner, mode and hard links, and can be "
    "undone with adapld undo. Nothing is written when generation is cut off or interrupted, "
    "when the original parses and the result does not, when the result loses code the "
    "instruction does not name, or when the file changed on disk meanwhile (see --force)."
)
EPILOG = (
    "Examples:\n\n"
    "  adapld edit app.py -i 'rename foo to bar'        (in place, like black)\n\n"
    "  adapld edit app.py -i 'add type hints' --diff    (print a diff, write nothing)\n\n"
    "  cat app.py | adapld edit - -i 'add docstrings' > out.py\n\n"
    "  adapld edit src/*.py -i 'use logging, not print' --check   (CI: exit 1 on changes)\n\n"
    "  adapld undo                                      (put back what the last run wrote)\n\n"
    "Exit codes: 0 done (edited or unchanged) · 1 refused by a check (truncated output, "
    "output that does not parse, code lost that the instruction does not name, file changed "
    "on disk during the edit; --test: no attempt passed the tests, file restored; --check "
    "found changes) · 2 bad usage or input (missing file, "
    "binary or non-UTF-8 file, FIFO or device, notebook, read-only file without --force, "
    "empty instruction, file too long for the model; also a --stats-json file that cannot "
    "be written; a --server that cannot be reached, times out or answers an error or "
    "garbage) · 130 interrupted by Ctrl-C and 143 by SIGTERM (the file being edited is "
    "left untouched; files finished before are listed).\n\n"
    "The model is --model, else $ADAPLD_MODEL, else the embedded "
    "Qwen2.5-Coder-1.5B-Instruct. NO_COLOR turns colour off; the live panel is drawn only "
    "when stderr is a terminal (not in CI or pre-commit)."
)


@app.command(help=HELP, epilog=EPILOG, no_args_is_help=True, cls=PlainHelpCommand)
def edit(
    paths: PathsArg,
    instruction: InstructionOpt = None,
    instruction_file: InstructionFileOpt = None,
    to_stdout: StdoutOpt = False,
    output: OutputOpt = None,
    diff: DiffOpt = False,
    check: CheckOpt = False,
    stats_json: StatsJsonOpt = None,
    force: ForceOpt = False,
    model: ModelOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = "auto",
    weights: WeightsOpt = None,
    threads: ThreadsOpt = None,
    server: ServerOpt = None,
    test: TestOpt = None,
    test_timeout: TestTimeoutOpt = DEFAULT_TIMEOUT_S,
    keep_failing: KeepFailingOpt = False,
    method: MethodOpt = Method.adapld,
    max_new_tokens: MaxNewTokensOpt = None,
    attempts: AttemptsOpt = DEFAULT_ATTEMPTS,
    whole_file: WholeFileOpt = False,
    temperature: TemperatureOpt = 0.0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = None,
    prompt: PromptOpt = None,
    stdin_filename: StdinFilenameOpt = None,
    no_live: NoLiveOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Edit files with the model (help text: ``HELP`` above)."""
    from adapld_cli.edit import EditError, EditOptions
    from adapld_cli.edit.interrupt import Signals
    from adapld_cli.edit.remote import ServerConfig
    from adapld_cli.edit.run import EditConfig, ModelConfig, run_edit
    from adapld_cli.edit.writeback import WriteBack
    from adapld_cli.ui import ConsoleView, stderr_console

    view = ConsoleView(stderr_console(), quiet=quiet, verbose=verbose, live=not no_live)
    try:
        writeback = WriteBack.from_options(
            paths=paths, to_stdout=to_stdout, output=output, diff=diff, check=check
        )
        config = EditConfig(
            paths=paths,
            instruction=_instruction_text(instruction, instruction_file),
            writeback=writeback,
            template=_template(prompt),
            options=EditOptions(
                method=method.value,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                force=force,  # the run's one --force: the judge and the write-back read it
                attempts=attempts,
                parts=not whole_file,
            ),
            model=ModelConfig(
                spec=model, device=device, dtype=dtype, threads=threads, weights=weights
            ),
            stdin_filename=stdin_filename,
            stats_json=stats_json,
            server=ServerConfig.from_options(server, model),
            test=_test(test, test_timeout, keep_failing, writeback),
        )
        with Signals() as signals:
            report = run_edit(config, view, signals=signals)
            with signals.deferred():  # decided: a late signal changes neither lines nor code
                view.summary(report)
    except EditError as exc:
        view.error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(report.exit_code)


def _instruction_text(instruction: str | None, instruction_file: Path | None) -> str:
    """The instruction from ``-i`` or ``--instruction-file``, stripped; UsageError if none,
    InputError if empty (both exit 2, before anything is read)."""
    from adapld_cli.edit.errors import UsageError
    from adapld_cli.edit.request import check_instruction

    if instruction is not None and instruction_file is not None:
        raise UsageError("give the instruction with -i or --instruction-file, not both")
    if instruction_file is not None:
        try:
            instruction = instruction_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--instruction-file {instruction_file}: {exc}") from None
    if instruction is None:
        raise UsageError("missing the instruction: -i 'what to change' (or --instruction-file)")
    return check_instruction(instruction)


def _test(
    command: str | None, timeout: float, keep_failing: bool, writeback: WriteBack
) -> TestConfig | None:
    """``--test`` and its options; a usage error where no file is written to test."""
    from adapld_cli.edit.errors import UsageError
    from adapld_cli.edit.testcmd import TestConfig

    if command is None:
        if keep_failing:
            raise UsageError("--keep-failing needs --test CMD")
        return None
    if not command.strip():
        raise UsageError("--test: empty command")
    if not writeback.mode.writes:
        raise UsageError(
            "--test needs the result written (in place or with -o), not --diff, --check or --stdout"
        )
    return TestConfig(command, timeout, keep_failing)


def _template(prompt: str | None) -> PromptTemplate:
    """The prompt template named by ``--prompt``; a bad name is a usage error (exit 2)."""
    from adapld_cli.edit import EditError, load_template
    from adapld_cli.edit.errors import UsageError

    try:
        return load_template(prompt)
    except EditError as exc:
        raise UsageError(str(exc)) from None
