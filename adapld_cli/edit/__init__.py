"""The edit layer: files in, edited files out, with the model's work in between.

Public API::

    from adapld_cli.edit import (
        EditSession, EditOptions, EditResult, PreparedEdit,   # session.py
        SourceFile, read_source, decode_source, encode_like, atomic_write, check_writable,
        EditError, InputError, RefusedError, UsageError,      # errors.py (exit codes 2 / 1)
        WriteBack, Mode, apply_result,                        # writeback.py: what happens
        Outcome, Status, RunReport,                           # outcome.py: what happened
        load_template, available_templates, unified_diff,
    )

A whole `adapld edit` run (inputs, model, every file, stats) is :func:`adapld_cli.edit.run.run_edit`
(imported from there: it pulls in the model layer).

Layering: this package knows the engine's API and the loaded model's ``.model`` /
``.tokenizer``; it knows nothing about terminals (the CLI and UI consume its results and the
engine events it forwards). Heavy imports (tree-sitter grammars, the engine) happen lazily.
"""

from adapld_cli.edit.diff import unified_diff
from adapld_cli.edit.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    EditError,
    InputError,
    RefusedError,
    UsageError,
)
from adapld_cli.edit.outcome import Outcome, RunReport, Status
from adapld_cli.edit.prompt import available_templates, load_template
from adapld_cli.edit.session import EditOptions, EditResult, EditSession, PreparedEdit
from adapld_cli.edit.source import (
    SourceFile,
    atomic_write,
    check_writable,
    decode_source,
    encode_like,
    read_source,
)
from adapld_cli.edit.writeback import Mode, WriteBack, apply_result

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "EditError",
    "EditOptions",
    "EditResult",
    "EditSession",
    "InputError",
    "Mode",
    "Outcome",
    "PreparedEdit",
    "RefusedError",
    "RunReport",
    "SourceFile",
    "Status",
    "UsageError",
    "WriteBack",
    "apply_result",
    "atomic_write",
    "available_templates",
    "check_writable",
    "decode_source",
    "encode_like",
    "load_template",
    "read_source",
    "unified_diff",
]
