"""Prompt templates and the conversation sent to the model; extraction of the edited file.

Template files (``prompts/*.txt``, shipped as ``adapld_cli.prompts``) are plain text::

    # comment lines at the top are ignored
    [system]            (optional)
    ...text...
    [user]
    ...text with {source}, {instruction}, {filename}, {language}...
    [assistant]         (optional: text the answer starts with, before the code fence)

``{source}`` expands to the file inside a code fence tagged with the language; ``{filename}``
to :func:`prompt_filename` (the path relative to the working directory, or the base name of a
file outside it), so the prompt, and hence the greedy output, does not depend on how the path
was spelled (``app.py``, ``./app.py``, ``$PWD/app.py``) nor on where a temporary copy lives.
Placeholders are substituted in one pass, so braces or placeholder names inside the file or
the instruction are left alone.

Contract of :func:`build_prompt`: the rendered chat (through the tokenizer's chat template,
or a plain fallback when it has none) ends with the assistant turn opened by the code fence
and a newline, so the model's first token is the first token of the file. Generation should
stop at :attr:`Prompt.stop_string` (newline + closing fence); :func:`extract_file` turns the
generated text back into the file, restoring the original's trailing-newline state.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapld_cli.edit.errors import InputError
from adapld_cli.edit.syntax import display_name

DEFAULT_TEMPLATE = "default"
_PLACEHOLDER = re.compile(r"\{(source|instruction|filename|language)\}")
_SECTION = re.compile(r"^\[(system|user|assistant)\][ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    user: str
    system: str | None = None
    assistant_prefix: str = ""


def available_templates() -> list[str]:
    """Names of the bundled templates."""
    return sorted(p.name[:-4] for p in _template_dir().iterdir() if p.name.endswith(".txt"))


def _template_dir() -> Any:
    """The bundled templates folder (installed package, or the repository's prompts/)."""
    import importlib.resources

    try:
        return importlib.resources.files("adapld_cli.prompts")
    except ModuleNotFoundError:  # running from a source tree without installation
        return Path(__file__).resolve().parents[2] / "prompts"


def load_template(spec: str | PromptTemplate | None = None) -> PromptTemplate:
    """Load a bundled template by name, or a template file by path (contains ``/`` or ends
    with ``.txt``); a :class:`PromptTemplate` is returned as it is. Raises
    :class:`InputError` for unknown names and malformed files."""
    if isinstance(spec, PromptTemplate):
        return spec
    spec = spec or DEFAULT_TEMPLATE
    if "/" in spec or "\\" in spec or spec.endswith(".txt"):
        path = Path(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--prompt {spec}: cannot read template ({exc})") from None
        return parse_template(text, path.stem)
    resource = _template_dir() / f"{spec}.txt"
    if not resource.is_file():
        names = ", ".join(available_templates())
        raise InputError(f"--prompt {spec}: no such template (bundled: {names}; or give a path)")
    return parse_template(resource.read_text(encoding="utf-8"), spec)


def parse_template(text: str, name: str = "custom") -> PromptTemplate:
    """Parse the template format described in the module docstring."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    body = "".join(lines)
    parts = _SECTION.split(body)
    sections: dict[str, str] = {}
    for i in range(1, len(parts) - 1, 2):
        sections[parts[i]] = parts[i + 1].strip("\n")
    if parts[0].strip():
        raise InputError(f"prompt template {name}: text before the first [section]")
    if "user" not in sections:
        raise InputError(f"prompt template {name}: missing the [user] section")
    if "{source}" not in sections["user"]:
        raise InputError(f"prompt template {name}: the [user] section must contain {{source}}")
    prefix = sections.get("assistant", "")
    return PromptTemplate(
        name=name,
        user=sections["user"],
        system=sections.get("system") or None,
        assistant_prefix=prefix + "\n" if prefix else "",
    )


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run that starts a line of ``text``."""
    runs = [len(m.group(1)) for m in re.finditer(r"(?m)^[ \t]*(`{3,})", text)]
    return "`" * max(3, max(runs, default=0) + 1)


@dataclass(frozen=True)
class Prompt:
    """The rendered prompt and how to read the answer."""

    text: str
    ids: list[int]
    fence: str
    stop_string: str  # "\n" + fence


def prompt_filename(name: str) -> str:
    """How the prompt names the file given as ``name``: its path relative to the working
    directory when it lies inside it (``src/app.py``), else its base name (``/tmp/x/app.py``
    -> ``app.py``); ``name`` itself when it has neither (``<stdin>``)."""
    try:
        return Path(os.path.abspath(name)).relative_to(os.getcwd()).as_posix()
    except ValueError:
        return Path(name).name or name


@dataclass(frozen=True)
class Conversation:
    """The chat for one file: ``messages`` (system and user turns), the ``opening`` the
    answer starts with (the template's assistant prefix, the code fence and a newline), and
    the ``fence``. Sent to a server, the opening is the last, assistant, message: the
    answer continues it."""

    messages: list[dict[str, str]]
    opening: str
    fence: str
    reference: str = ""  # text the drafts copy from besides the prompt (a rejected answer)
    # the answer says why before it gives the file: its opening holds no fence, and it runs
    # to the end of the turn (see fix_conversation)
    explain: bool = False

    @property
    def with_opening(self) -> list[dict[str, str]]:
        """The messages plus the opening as the assistant turn to continue (none when the
        opening is empty: the answer starts a turn of its own)."""
        if not self.opening:
            return list(self.messages)
        return [*self.messages, {"role": "assistant", "content": self.opening}]


def conversation(
    template: PromptTemplate, *, code: str, instruction: str, filename: str, lang: str | None
) -> Conversation:
    """The messages and answer opening for editing ``code`` (no tokenizer needed)."""
    fence = fence_for(code)
    tag = lang or ""
    block = f"{fence}{tag}\n{code}{'' if code.endswith(chr(10)) or not code else chr(10)}{fence}"
    values = {
        "source": block,
        "instruction": instruction.strip(),
        "filename": prompt_filename(filename),
        "language": display_name(lang),
    }
    user = _PLACEHOLDER.sub(lambda m: values[m.group(1)], template.user)
    system = (
        _PLACEHOLDER.sub(lambda m: values[m.group(1)], template.system) if template.system else None
    )
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    return Conversation(messages, f"{template.assistant_prefix}{fence}{tag}\n", fence)


REPAIR_NOTE = (
    "\n\nAn earlier answer to this was rejected. {feedback} Edit the original file again, keep "
    "every other line, comment and definition as it is, and reply with the complete edited file "
    "in a single code block."
)


def repair_conversation(base: Conversation, answer: str, feedback: str) -> Conversation:
    """``base`` (a first attempt's conversation) with ``feedback`` on the rejected ``answer``
    added to its last user turn as a note, and ``answer`` as the reference drafts copy from.

    The rejected answer is not shown to the model: a small model shown its own answer copies
    it back, feedback or not, under greedy decoding (docs/design.md, "Repair on refusal").
    Built from ``base`` each time, so a third attempt's prompt is the first one plus only the
    latest note; everything before the note is the first prompt's, and its cache rows are
    reused."""
    note = REPAIR_NOTE.format(feedback=feedback.strip())
    return Conversation(_noted(base, note), base.opening, base.fence, reference=answer)


def _noted(base: Conversation, note: str) -> list[dict[str, str]]:
    """``base``'s messages (copies) with ``note`` added to the last user turn."""
    messages = [dict(m) for m in base.messages]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[last]["content"] += note
    return messages


REPAIR_PART_NOTE = (
    "\n\nAn earlier answer to this was rejected. {feedback} Reply with only `{name}` as it "
    "should be: its complete definition, in a single code block."
)


def repair_part_conversation(
    base: Conversation, code: str, feedback: str, name: str, header: str
) -> Conversation:
    """``base`` with ``feedback`` on a rejected answer and the request for only the
    definition ``name`` added to its last user turn; the answer opens with ``header`` (the
    definition's first line up to its name) and ``code`` (the rejected definition) is the
    reference. As :func:`repair_conversation`, everything before the note is the first
    prompt's, and the notes of one repair's definitions differ only from ``name`` on."""
    note = REPAIR_PART_NOTE.format(feedback=feedback.strip(), name=name)
    return Conversation(_noted(base, note), base.opening + header, base.fence, reference=code)


FIX_REQUEST = (
    "{instruction}\n\nThis file already tries to make that change, but the tests fail with it "
    "({how}). Their output:\n\n{output}\n\nFix the file so that the tests pass."
)
EXPLAIN_NOTE = (
    " First say in one or two sentences what causes the failure, then reply with the complete "
    "fixed file in a single code block."
)


def fix_conversation(
    template: PromptTemplate,
    *,
    code: str,
    instruction: str,
    how: str,
    output: str,
    filename: str,
    lang: str | None,
) -> Conversation:
    """A request to fix ``code``, an answer the tests fail: the template's conversation with
    ``code`` as the file and, as the instruction, ``instruction``, that the tests fail with it
    (``how``: ``exit 1``), their ``output`` and "fix the file so that the tests pass", then a
    note asking first for the cause in a sentence or two, then the whole file. The answer
    starts its own turn (no fence opened: ``explain``) and ``code`` is the drafts' reference.

    Why this form (docs/design.md, "Fixing a failing result"): told the tests' output as a note
    on its first request, the default model regenerates its first answer; handed that answer
    as the user's file and asked to name the cause first, it sometimes fixes it."""
    request = FIX_REQUEST.format(instruction=instruction, how=how, output=output.strip())
    conv = conversation(template, code=code, instruction=request, filename=filename, lang=lang)
    return Conversation(
        _noted(conv, EXPLAIN_NOTE), template.assistant_prefix, conv.fence, code, explain=True
    )


def after_explanation(text: str, fence: str) -> str:
    """An explaining answer's text from the line after the fence that opens its code block,
    as :func:`extract_file` takes an answer: the first line starting with ``fence`` when it
    names a language (```` ```python ````) or a later fence line closes it. ``text`` itself
    otherwise: an answer that gave the file alone, up to its closing fence."""
    lines = list(re.finditer(rf"^{re.escape(fence)}([^\n]*)(?:\n|$)", text, re.MULTILINE))
    if not lines or (len(lines) == 1 and not lines[0].group(1).strip()):
        return text
    return text[lines[0].end() :]


def chat_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text for ``messages``, ending where the answer starts: the tokenizer's chat
    template with the assistant turn opened, or a plain fallback when it has none. A last
    message from the assistant is not a finished turn but the start of the answer (a
    prefill): its text follows the opened turn as it is, and the model continues it."""
    prefill = ""
    if messages and messages[-1]["role"] == "assistant":
        prefill, messages = messages[-1]["content"], messages[:-1]
    if getattr(tokenizer, "chat_template", None):
        chat = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        chat = "".join(f"{m['content']}\n\n" for m in messages)
    return chat + prefill


def build_prompt(
    template: PromptTemplate,
    tokenizer: Any,
    *,
    code: str,
    instruction: str,
    filename: str,
    lang: str | None,
) -> Prompt:
    """Render and tokenize the prompt for one file."""
    conv = conversation(template, code=code, instruction=instruction, filename=filename, lang=lang)
    return conversation_prompt(conv, tokenizer)


def conversation_prompt(conv: Conversation, tokenizer: Any) -> Prompt:
    """Render and tokenize a conversation (its opening continued by the answer)."""
    text = chat_text(tokenizer, conv.with_opening)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return Prompt(text=text, ids=ids, fence=conv.fence, stop_string="\n" + conv.fence)


def extract_file(generated: str, fence: str, *, trailing_newline: bool) -> tuple[str, bool]:
    """The edited file from the generated text, and whether the closing fence was seen.

    The text before the first line that starts with ``fence`` is the file (a file emitted as
    an empty block counts). The newline before the fence belongs to the fence; the result
    ends with a newline exactly when the original did (blank lines the model added at the end
    are kept).
    """
    if generated.startswith(fence):
        body, closed = "", True
    else:
        idx = generated.find("\n" + fence)
        closed = idx >= 0
        body = generated[:idx] if closed else generated
        if not closed and body.endswith("\n"):
            body = body[:-1]
    if trailing_newline and body:
        body += "\n"
    return body, closed
