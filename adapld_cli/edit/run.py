"""One `adapld edit` run, the edit pipeline: inputs → generate → judge → repair → apply → report.

Contract: :func:`run_edit` takes a typed :class:`EditConfig` and a :class:`View` (the CLI's
terminal output; this module never prints) and returns the :class:`RunReport`, whose
``exit_code`` is the process's. Order of work:

1. every input is read (:mod:`.inputs`; bad ones become ``error`` outcomes) — without any
   good one, the model is never loaded;
2. the model loads once (``threads`` set first; :mod:`.local`), or the server is reached
   (:mod:`.remote`); a model or server error is exit 2;
3. for each file: the prompt is prepared (:mod:`.request`), then each attempt
   (:mod:`.repair`) is generated under its own live panel and judged (:mod:`.judge`); the
   result is applied (:mod:`.writeback`) and its outcome reported (:mod:`.outcome`: stdout
   data, result line, ``--stats-json`` row) before the next file starts. A stats-file failure
   is reported as its own error (exit 2) and never changes the outcome of the file.

:func:`edit_file` is step 3's generation without a view, for library callers.

Interrupts (``KeyboardInterrupt``, or SIGINT/SIGTERM through
:class:`~adapld_cli.edit.interrupt.Signals`): during loading or generation the current file
is left untouched and the run stops (130, or 143 for SIGTERM). From the end of generation
until its outcome is reported a signal is held back; one that arrives before the write
cancels it, one that arrives after it lets the written file be reported as written and then
stops the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapld_cli.edit.errors import EXIT_USAGE, EditError
from adapld_cli.edit.files.journal import Journal, Run
from adapld_cli.edit.files.source import SourceFile
from adapld_cli.edit.inputs import EditInput, read_inputs
from adapld_cli.edit.interrupt import Interrupted, Signals, describe, exit_code_of
from adapld_cli.edit.judge import EditResult, Status, judge
from adapld_cli.edit.local import LocalModel
from adapld_cli.edit.outcome import Outcome, RunReport, StatsLog
from adapld_cli.edit.parts import generate, prepare_edit
from adapld_cli.edit.prompt import PromptTemplate
from adapld_cli.edit.remote import ChatClient, RemoteModel, ServerConfig, ServerError
from adapld_cli.edit.repair import Attempt, Attempts
from adapld_cli.edit.request import EditOptions
from adapld_cli.edit.testcmd import TestConfig, TestJudge
from adapld_cli.edit.writeback import WriteBack, apply_result
from adapld_cli.engine.types import StepEvent, UnsupportedModelError
from adapld_cli.model.errors import ModelError

Backend = LocalModel | RemoteModel
EventHook = Callable[[StepEvent], None]


@dataclass(frozen=True)
class ModelConfig:
    """Which model to load and how (``None``: the defaults of :func:`adapld_cli.model.load`)."""

    spec: str | None = None
    device: str | None = None
    dtype: str = "auto"
    threads: int | None = None  # torch CPU threads; None: the physical cores
    weights: str | None = None  # auto | quantized | dequantized; None: $ADAPLD_WEIGHTS, auto


@dataclass(frozen=True)
class EditConfig:
    """Everything `adapld edit` was asked to do, parsed and checked."""

    paths: list[str]
    instruction: str
    template: PromptTemplate
    writeback: WriteBack = field(default_factory=WriteBack)
    options: EditOptions = field(default_factory=EditOptions)  # its ``force`` is the run's
    model: ModelConfig = field(default_factory=ModelConfig)
    stdin_filename: str | None = None
    stats_json: Path | None = None
    server: ServerConfig | None = None  # generate through this server instead of loading
    test: TestConfig | None = None  # --test: the user's tests judge each written result


class View(Protocol):
    """What a run shows (implemented by :class:`adapld_cli.ui.ConsoleView`)."""

    verbose: bool

    def progress(self) -> bool | None: ...  # the model loader's progress bar setting
    def note(self, message: str) -> None: ...  # a line worth seeing (not with --quiet)
    def info(self, message: str) -> None: ...  # details (verbose only)
    def error(self, message: str) -> None: ...  # ``adapld: error: ...``
    def data(self, data: bytes) -> None: ...  # stdout
    def outcome(self, outcome: Outcome) -> None: ...  # the file's result line
    def generating(self, name: str, tokenizer: Any, method: str) -> AbstractContextManager[Any]: ...


def run_edit(
    config: EditConfig,
    view: View,
    *,
    signals: Signals | None = None,
    on_event: EventHook | None = None,
) -> RunReport:
    """Run the edit (see the module contract). Raises only :class:`EditError` for a
    ``--stats-json`` file that cannot be created, before anything else happens.
    ``on_event`` sees every generation step (after the view's live panel)."""
    stats = StatsLog(config.stats_json)
    run = _Run(config, view, signals or Signals(), stats, on_event)
    try:
        run.all()
    except KeyboardInterrupt as exc:  # while reading the inputs or loading the model
        view.error(f"{describe(exc)}; nothing written")
        run.report.fail(exit_code_of(exc))
    finally:
        with run.signals.deferred():  # the files' outcomes are decided: report them as they are
            run.stats_problem(stats.close())
    return run.report


class _Run:
    def __init__(
        self,
        config: EditConfig,
        view: View,
        signals: Signals,
        stats: StatsLog,
        on_event: EventHook | None,
    ) -> None:
        self.config = config
        self.view = view
        self.signals = signals
        self.stats = stats
        self.on_event = on_event
        self.report = RunReport()
        self.journal = _journal(config)
        self.tests = None if config.test is None else TestJudge(config.test, self.journal)

    def all(self) -> None:
        cfg = self.config
        items = read_inputs(
            cfg.paths,
            cfg.writeback,
            force=cfg.options.force,
            stdin=_stdin(),
            stdin_filename=cfg.stdin_filename,
        )
        self.report.inputs = len(items)
        todo = [item for item in items if isinstance(item, EditInput)]
        for item in items:
            if isinstance(item, Outcome):
                self.finish(item)
        if todo and self.tests is not None:
            self.baseline(self.tests)
        backend = self.backend() if todo else None
        if backend is None:
            return
        try:
            for n, item in enumerate(todo):
                if self.one(backend, item) or self.stop_after(len(todo) - n - 1):
                    return
        finally:
            if isinstance(backend, RemoteModel):
                backend.close()

    def backend(self) -> Backend | None:
        """Load the model, or connect to the server (``None`` after reporting a model or
        server error)."""
        if self.config.server is not None:
            return self.remote(self.config.server)
        started = time.perf_counter()
        try:
            loaded, threads = load_model(
                self.config.model, verbose=self.view.verbose, progress=self.view.progress()
            )
        except ModelError as exc:
            self.view.error(str(exc))
            self.report.fail(EXIT_USAGE)
            return None
        self.view.info(
            f"model {loaded.name} ({loaded.source}) on {loaded.device}, {loaded.dtype}"
            f"{', ' + loaded.weights_label() if loaded.weights == 'quantized' else ''}, "
            f"{threads} threads, loaded in {time.perf_counter() - started:.1f}s"
        )
        local = LocalModel(loaded, self.config.options, self.config.template)
        self.view.info(f"prompt template {local.template.name}; method {local.method}")
        return local

    def remote(self, server: ServerConfig) -> RemoteModel | None:
        client = ChatClient(server)
        try:
            remote = RemoteModel(client, self.config.options, self.config.template)
        except ServerError as exc:
            client.close()
            self.view.error(str(exc))
            self.report.fail(exc.exit_code)
            return None
        self.view.info(
            f"server {server.url}, model {remote.model}; prompt template {remote.template.name}"
        )
        return remote

    def baseline(self, tests: TestJudge) -> None:
        """``--test``: run the tests once before any edit, and say so when they fail."""
        run = tests.run_baseline()
        if not run.passed:
            self.view.note(
                f"adapld: the tests fail before the edit ({run.summary()}); a result is kept "
                "only if they pass with it"
            )

    def one(self, backend: Backend, item: EditInput) -> bool:
        """Edit, apply and report one file; True when the run must stop (interrupted)."""
        try:
            if self.tests is None:
                result = self.generate(backend, item)
                with self.signals.deferred():
                    outcome = self.apply(result, item)
                    self.finish(outcome)
            else:
                outcome = self.generate_tested(backend, item, self.tests)
                with self.signals.deferred():
                    self.finish(outcome)
        except KeyboardInterrupt as exc:
            outcome = Outcome.interrupted(item.name, exc)
            self.finish(outcome)
        except EditError as exc:
            outcome = Outcome.failed(item.name, exc)
            self.finish(outcome)
        except (ModelError, UnsupportedModelError) as exc:  # this model cannot do that: exit 2
            outcome = Outcome(item.name, Status.ERROR, EXIT_USAGE, str(exc))
            self.finish(outcome)
        return outcome.status is Status.INTERRUPTED

    def apply(self, result: EditResult, item: EditInput) -> Outcome:
        """Apply under the write-back mode; a signal held back until the write cancels it."""
        try:
            return apply_result(
                result,
                self.config.writeback,
                force=self.config.options.force,
                name=item.name,
                checkpoint=self.signals.check,
                journal=self.journal,
            )
        except KeyboardInterrupt as exc:
            return Outcome.interrupted(item.name, exc)

    def generate(self, backend: Backend, item: EditInput) -> EditResult:
        """Prepare, then generate and judge each attempt (:class:`Attempts`: the first and
        its repairs, up to ``--attempts``), each under its own live panel."""
        attempts = self.attempts(backend, item)
        for attempt in attempts:
            attempts.record(self.attempt(backend, item, attempt))
        return self.result(item, attempts)

    def generate_tested(self, backend: Backend, item: EditInput, tests: TestJudge) -> Outcome:
        """``--test``: as :meth:`generate`, but each changed result is applied and tested at
        once; one the tests fail is put back and repaired with their output
        (:class:`~adapld_cli.edit.testcmd.TestJudge`), as is an unchanged one when they failed
        before the edit. The file's outcome."""
        attempts = self.attempts(backend, item)
        for attempt in attempts:
            result = self.attempt(backend, item, attempt)
            if result.status is Status.UNCHANGED:
                tests.refuse_unchanged(result)  # failing before: the model hears why
            elif result.status is Status.CHANGED:
                with self.signals.deferred():
                    outcome = self.apply(result, item)
                if outcome.written is None:  # not written (refused, error): nothing to test
                    return tests.report(outcome)
                if self.signals.pending is not None:  # arrived during the write: take it back
                    tests.take_back(outcome)
                    self.signals.check()
                run = tests.after(outcome)
                if run.passed:
                    attempts.record(result)  # counts the earlier attempts in it
                    return tests.report(tests.passed(outcome, run))
                tests.refuse(result, outcome, run)
                attempt.prepared.source = result.source  # the next attempt repairs from it
            attempts.record(result)
        result = tests.finished(self.result(item, attempts))
        with self.signals.deferred():  # as every write: a signal before it cancels it
            return tests.report(self.apply(result, item))

    def attempts(self, backend: Backend, item: EditInput) -> Attempts:
        """The file's prompt, prepared, as the attempt loop's start."""
        prepared = prepare_edit(backend, item.source, self.config.instruction, item.lang)
        if prepared.conversation is not None:
            self.view.info(backend.describe(prepared))
        if prepared.plan is not None:
            names = ", ".join(p.name for p in prepared.plan.parts)
            whole = "" if prepared.conversation else " (too long for the context as a whole)"
            verb = "renaming in" if prepared.plan.mechanical else "rewriting"
            self.view.info(
                f"{item.name}: {verb} {len(prepared.plan.parts)} part(s){whole}: {names}"
            )
        return Attempts(backend, prepared)

    def attempt(self, backend: Backend, item: EditInput, attempt: Attempt) -> EditResult:
        """Generate one attempt under its live panel, and judge it."""
        title = item.name
        if attempt.previous is not None:
            title = f"{item.name} (attempt {attempt.number})"
            feedback = (attempt.previous.feedback or "").split("\n")[0]
            if attempt.previous.test_run is not None:  # its first line only names the command
                feedback = f"the tests fail ({attempt.previous.test_run.summary()})."
            plan = attempt.prepared.plan
            again = "Asking again"
            conv = attempt.prepared.conversation
            if plan is not None and plan.base is not None:  # a repair by parts
                again += " for " + ", ".join(p.name for p in plan.parts)
            elif conv is not None and conv.explain:  # shown the failing file
                again = "Asking for the cause and a fixed file"
            self.view.info(
                f"{item.name}: attempt {attempt.previous.attempts} "
                f"{attempt.previous.status}: {feedback} {again}."
            )
        with self.view.generating(title, backend.tokenizer, backend.method) as panel:
            generation = generate(backend, attempt.prepared, _chain(panel, self.on_event))
        return judge(attempt.prepared, generation, force=self.config.options.force)

    def result(self, item: EditInput, attempts: Attempts) -> EditResult:
        """The attempts' result, the one that may be written."""
        result = attempts.result
        assert result is not None
        if result.stats.graph_fallback:  # CUDA only: a capture failed, later passes ran eagerly
            self.view.info(
                f"{item.name}: CUDA graphs off, passes ran eagerly ({result.stats.graph_fallback})"
            )
        return result

    def finish(self, outcome: Outcome) -> None:
        """Report one file: stdout data, result line, stats row."""
        self.report.add(outcome)
        self.view.data(outcome.data)
        self.view.outcome(outcome)
        self.stats_problem(self.stats.write(outcome))

    def stats_problem(self, message: str | None) -> None:
        if message:
            self.view.error(message)
            self.report.fail(EXIT_USAGE)

    def stop_after(self, remaining: int) -> bool:
        """A signal held back while the last file was applied: stop the run here."""
        if self.signals.pending is None:
            return False
        exc = Interrupted(self.signals.pending)
        self.signals.pending = None
        if remaining:
            self.view.error(f"{describe(exc)}; {remaining} more file(s) not edited")
            self.report.fail(exc.exit_code)
        return True


def edit_file(
    backend: Backend,
    source: SourceFile,
    instruction: str,
    lang: str | None = None,
    on_event: EventHook | None = None,
) -> EditResult:
    """One file's edit without a view: prepare, then generate and judge each attempt.
    Raises :class:`~adapld_cli.edit.errors.InputError` before generating (see
    :func:`~adapld_cli.edit.request.prepare`)."""
    attempts = Attempts(backend, prepare_edit(backend, source, instruction, lang))
    for attempt in attempts:
        generation = generate(backend, attempt.prepared, on_event)
        attempts.record(judge(attempt.prepared, generation, force=backend.options.force))
    assert attempts.result is not None
    return attempts.result


def load_model(
    config: ModelConfig, *, verbose: bool = False, progress: bool | None = None
) -> tuple[Any, int]:
    """Set torch's CPU threads, then load the model: ``(LoadedModel, threads)``.
    Raises :class:`~adapld_cli.model.ModelError`."""
    from adapld_cli.model import load
    from adapld_cli.model.placement import set_threads

    threads = set_threads(config.threads)
    loaded = load(
        config.spec,
        device=config.device,
        dtype=config.dtype,
        weights=config.weights,
        verbose=verbose,
        progress=progress,
    )
    return loaded, threads


def _journal(config: EditConfig) -> Run | None:
    """The undo journal's run for a run that writes files (nothing on disk until a write)."""
    if not config.writeback.mode.writes:
        return None
    return Journal().begin(config.instruction)


def _chain(*hooks: EventHook | None) -> EventHook | None:
    """One callback calling each of ``hooks`` that is set (``None`` when none is)."""
    live = [h for h in hooks if h is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def call(event: StepEvent) -> None:
        for hook in live:
            hook(event)

    return call


def _stdin() -> Any:
    return getattr(sys.stdin, "buffer", sys.stdin)
