"""The options of `adapld edit`, each an ``Annotated`` type for a Typer parameter (the options
several commands share live in :mod:`adapld_cli.cli.options`). Help texts and panels live
only here; :mod:`adapld_cli.cli.edit` declares the command with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from adapld_cli.engine.methods import METHOD_HELP, Method

_OUT = "Output"
_GEN = "Generation"
_SHOW = "Display"


def _opt(*names: str, help: str, panel: str | None = None, **kw: Any) -> Any:
    """A Typer option; its default is shown only when asked (most read as 'none')."""
    kw.setdefault("show_default", False)
    return typer.Option(*names, help=help, rich_help_panel=panel, **kw)


PathsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="PATH",
        help="Files to edit (in place by default). - reads stdin and writes the result to stdout.",
        show_default=False,
    ),
]
InstructionOpt = Annotated[
    str | None, _opt("--instruction", "-i", metavar="TEXT", help="What to change, in plain words.")
]
InstructionFileOpt = Annotated[
    Path | None,
    _opt("--instruction-file", metavar="PATH", help="Read the instruction from a file."),
]
StdoutOpt = Annotated[
    bool,
    _opt("--stdout", help="Print the edited file to stdout; leave the file as is.", panel=_OUT),
]
OutputOpt = Annotated[
    Path | None,
    _opt(
        "--output",
        "-o",
        metavar="PATH",
        help="Write the edited file here instead (one input).",
        panel=_OUT,
    ),
]
DiffOpt = Annotated[
    bool,
    _opt(
        "--diff",
        help="Print a unified diff to stdout and write nothing. Hunk headers name the function "
        "or class they are in.",
        panel=_OUT,
    ),
]
CheckOpt = Annotated[
    bool,
    _opt(
        "--check",
        help="Write nothing; exit 1 when any file would change and list those files (for CI). "
        "Combine with --diff to see the changes.",
        panel=_OUT,
    ),
]
StatsJsonOpt = Annotated[
    Path | None,
    _opt(
        "--stats-json",
        metavar="PATH",
        help="Write decoding statistics, one JSON object per line and file (method, new_tokens, "
        "forward_passes, mean_accepted, prefill_s, decode_s, total_s, drafting counters).",
        panel=_OUT,
    ),
]
ForceOpt = Annotated[
    bool,
    _opt(
        "--force",
        help="Write what a check refused: a result that does not parse although the original "
        "did, one that loses code the instruction does not name, or a read-only file.",
        panel=_OUT,
    ),
]
MethodOpt = Annotated[Method, _opt("--method", help=METHOD_HELP, panel=_GEN, show_default=True)]
MaxNewTokensOpt = Annotated[
    int | None,
    _opt(
        "--max-new-tokens",
        min=1,
        metavar="N",
        help="Most tokens to generate per file. Default: twice the file's length + 256, within "
        "the model's context.",
        panel=_GEN,
    ),
]
AttemptsOpt = Annotated[
    int,
    _opt(
        "--attempts",
        min=1,
        metavar="N",
        help="Generations per file: a result refused by a check (it does not parse, or loses "
        "code the instruction does not name) or returned unchanged is asked for again, with "
        "the reason, up to N generations in all. Only an accepted result is written; 1 = "
        "never ask again.",
        panel=_GEN,
        show_default=True,
    ),
]
WholeFileOpt = Annotated[
    bool,
    _opt(
        "--whole-file",
        help="Rewrite the whole file even when it is big. By default, in a file of 200 lines "
        "or more, an instruction that renames something or names the definitions to change "
        "rewrites only the parts it touches (every other byte is kept); anything else "
        "rewrites the whole file.",
        panel=_GEN,
    ),
]
TemperatureOpt = Annotated[
    float,
    _opt(
        "--temperature",
        min=0.0,
        metavar="FLOAT",
        help="0 = greedy (deterministic).",
        panel=_GEN,
        show_default=True,
    ),
]
TopPOpt = Annotated[
    float,
    _opt(
        "--top-p",
        min=0.0,
        max=1.0,
        metavar="FLOAT",
        help="Nucleus sampling (with --temperature > 0).",
        panel=_GEN,
        show_default=True,
    ),
]
SeedOpt = Annotated[
    int | None, _opt("--seed", metavar="N", help="Random seed for sampling.", panel=_GEN)
]
PromptOpt = Annotated[
    str | None,
    _opt(
        "--prompt",
        metavar="NAME|PATH",
        help="Prompt template: a bundled name (default, minimal, strict, sandwich) or a "
        "template file.",
        panel=_GEN,
    ),
]
StdinFilenameOpt = Annotated[
    str | None,
    _opt(
        "--stdin-filename",
        metavar="NAME",
        help="File name to assume for '-' (picks the language for the prompt and the syntax "
        "check).",
        panel=_GEN,
    ),
]
NoLiveOpt = Annotated[
    bool, _opt("--no-live", help="No live panel; print one result line per file.", panel=_SHOW)
]
QuietOpt = Annotated[bool, _opt("--quiet", "-q", help="Print errors only.", panel=_SHOW)]
ServerOpt = Annotated[
    str | None,
    _opt(
        "--server",
        metavar="URL",
        help="Generate with the model behind this OpenAI-compatible base URL (adapld serve, "
        "llama.cpp's llama-server, vLLM, ...; e.g. http://127.0.0.1:8000/v1) instead of "
        "loading one; --model then names the server's model (default: the first it lists). "
        "Checks, write-back and undo are the same. Default: $ADAPLD_SERVER; the key, if "
        "any, from $ADAPLD_API_KEY.",
        panel="Model",
    ),
]
_TEST = "Tests"
TestOpt = Annotated[
    str | None,
    _opt(
        "--test",
        metavar="CMD",
        help="Run CMD (through the shell, here) once before the edit and again after each "
        "result is written; a result it fails (non-zero exit) is put back and asked for again "
        "with the command's output, within --attempts. When none passes, the original file "
        "stays (exit 1). In place or with -o only.",
        panel=_TEST,
    ),
]
TestTimeoutOpt = Annotated[
    float,
    _opt(
        "--test-timeout",
        min=0.1,
        metavar="SECONDS",
        help="Kill the test command (its whole process group) after this long: a failure.",
        panel=_TEST,
        show_default=True,
    ),
]
KeepFailingOpt = Annotated[
    bool,
    _opt(
        "--keep-failing",
        help="With --test: keep the last result the tests fail instead of the original "
        "(with a warning).",
        panel=_TEST,
    ),
]
VerboseOpt = Annotated[
    bool,
    _opt("--verbose", "-v", help="Also print model, prompt and budget details.", panel=_SHOW),
]
