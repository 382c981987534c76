"""The edit layer: files in, edited files out, with the model's work in between.

The pipeline of one `adapld edit` run (:func:`adapld_cli.edit.run.run_edit`, imported from
there: it pulls in the model layer), one room each:

    inputs.py     read the files up front (bad ones are outcomes before the model loads)
    request.py    the options (one ``force``) and the prompt fitted into the context
    local.py      generation on this machine          remote.py   the same over a server
    judge.py      may the result be written: truncation, parse, scope (guard/), names
    repair.py     the attempt loop: ask again with the reason, within ``--attempts``
    writeback.py  apply the result: in place, --output, --stdout, --diff, --check
    outcome.py    what became of each file, and the run
    files/        reading and encoding sources, the atomic write, the undo journal

Public API::

    from adapld_cli.edit import (
        EditOptions, PreparedEdit, Generation, prepare,       # request.py
        LocalModel,                                           # local.py
        EditResult, Status, judge,                            # judge.py
        Attempts,                                             # repair.py
        SourceFile, read_source, decode_source, encode_like, atomic_write, check_writable,
        EditError, InputError, RefusedError, UsageError,      # errors.py (exit codes 2 / 1)
        WriteBack, Mode, apply_result,                        # writeback.py: what happens
        Outcome, RunReport,                                   # outcome.py: what happened
        load_template, available_templates, unified_diff,
    )

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
from adapld_cli.edit.files.source import (
    SourceFile,
    atomic_write,
    check_writable,
    decode_source,
    encode_like,
    read_source,
)
from adapld_cli.edit.judge import EditResult, Status, judge
from adapld_cli.edit.local import LocalModel
from adapld_cli.edit.outcome import Outcome, RunReport
from adapld_cli.edit.prompt import available_templates, load_template
from adapld_cli.edit.repair import Attempts
from adapld_cli.edit.request import EditOptions, Generation, PreparedEdit, prepare
from adapld_cli.edit.writeback import Mode, WriteBack, apply_result

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "Attempts",
    "EditError",
    "EditOptions",
    "EditResult",
    "Generation",
    "InputError",
    "LocalModel",
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
    "judge",
    "load_template",
    "prepare",
    "read_source",
    "unified_diff",
]
