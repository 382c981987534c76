"""A repair after the tests failed a result asks only for the definitions the edit changed
(or the failure names), with the first attempt's whole-file prompt, and splices them into the
rejected result: every other line is that result's. The plan is pure; the splice runs with a
backend that answers each definition's prompt as scripted (the splice is under test here, not
the model); the real model's repair by parts is the ``real`` test at the end."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from adapld_cli.edit import EditOptions, decode_source, prepare
from adapld_cli.edit.judge import Status, judge
from adapld_cli.edit.parts import generate
from adapld_cli.edit.plan import plan_repair
from adapld_cli.edit.prompt import REPAIR_NOTE, REPAIR_PART_NOTE
from adapld_cli.edit.repair import repair_request
from adapld_cli.edit.repair_parts import UNIT_STOPS, first_definition
from adapld_cli.edit.request import Generation
from adapld_cli.edit.testcmd import TestRun, bounded_output
from adapld_cli.engine.types import Stats
from tests.test_edit_parts import Rewriter

ORIGINAL = """import math

LIMIT = 3


def area(r):
    return math.pi * r ** 2


class Shape:
    def __init__(self, r):
        self.r = r

    @property
    def size(self):
        return area(self.r)

    def label(self):
        return "shape"

    def ratio(self):
        return self.r / LIMIT


def describe(r):
    return f"r={r}"


def report(shapes):
    return [describe(s.r) for s in shapes]
"""
# the rejected answer: `size` changed, `grow` added
REJECTED = ORIGINAL.replace("        return area(self.r)\n", "        return area(self.r) * 2\n")
GROW = "    def grow(self, k):\n        self.r *= k\n\n"
REJECTED = REJECTED.replace("    def label(self):\n", GROW + "    def label(self):\n")
FAILURE = (
    "The tests (`pytest`) fail with your file (exit 1). Their output:\n\n"
    'Traceback (most recent call last):\n  File "t.py", line 9, in <module>\n'
    '  File "shapes.py", line 27, in describe\nAssertionError\n\nMake them pass.'
)


def names(plan) -> list[str]:
    return [p.name for p in plan.parts]


def test_the_plan_names_what_the_edit_changed_and_where_it_failed():
    plan = plan_repair(ORIGINAL, REJECTED, "python", FAILURE)
    assert names(plan) == ["Shape.size", "Shape.grow", "describe"]
    assert plan.base == REJECTED and plan.feedback == FAILURE and not plan.mechanical
    lines = REJECTED.splitlines()
    assert lines[plan.parts[0].start - 1] == "    @property"  # with its decorator
    # pytest's frames name functions too; a name of no definition here is ignored
    pytest_out = "shapes.py:27: in describe\n    assert x\nt.py:3: in test_it"
    assert names(plan_repair(ORIGINAL, REJECTED, "python", pytest_out))[-1] == "describe"
    assert names(plan_repair(ORIGINAL, REJECTED, "python", "exit 1")) == [
        "Shape.size",
        "Shape.grow",
    ]


ONE_FUNCTION = "import os\n\n\ndef f(x):\n" + "".join(f"    x += {i}\n" for i in range(12))


@pytest.mark.parametrize(
    ("original", "rejected", "lang"),
    [
        (ORIGINAL, REJECTED.replace("LIMIT = 3", "LIMIT = 4"), "python"),  # a statement
        (ORIGINAL, REJECTED.replace("import math", "import math\nimport os"), "python"),
        (ORIGINAL, REJECTED + "def broken(:\n", "python"),  # does not parse
        (ORIGINAL, REJECTED, "javascript"),
        (ORIGINAL, ORIGINAL + "# the end\n", "python"),  # no definition changed
        (ONE_FUNCTION, ONE_FUNCTION.replace("x += 3", "x -= 3"), "python"),  # most of it
    ],
)
def test_no_repair_plan_means_the_whole_file(original, rejected, lang):
    assert plan_repair(original, rejected, lang, "exit 1") is None


@pytest.mark.parametrize(
    "error",
    [
        "NameError: name 'logger' is not defined",
        "ModuleNotFoundError: No module named 'numpy'",
        "E   ImportError: cannot import name 'x'",
    ],
)
def test_a_missing_name_is_repaired_in_the_whole_file(error):
    """An import or a module-level assignment fixes it, and neither is a definition."""
    assert (
        plan_repair(ORIGINAL, REJECTED, "python", FAILURE.replace("AssertionError", error)) is None
    )


@dataclass
class Answers(Rewriter):
    """A backend that answers a definition's prompt with ``edit[name]`` (the text after the
    opening, as a model continues it); it keeps every request it saw."""

    edit: dict = field(default_factory=dict)

    def generate(self, prepared, on_event=None) -> Generation:
        self.seen.append(prepared)
        note = prepared.conversation.messages[-1]["content"]
        name = next(n for n in self.edit if f"only `{n}` as it" in note)
        return Generation(self.edit[name], Stats(new_tokens=3), "stop_string", [3, 3, 3])


def _failed(backend, src, text: str) -> tuple:
    first = prepare(backend, src, "Make size double and add grow")
    result = judge(first, Generation(text + "```", Stats(), "stop_string"))
    assert result.status is Status.CHANGED
    result.status, result.feedback = Status.REFUSED, FAILURE
    result.test_run = TestRun("pytest -q", 1, 0.1, FAILURE, 300.0)
    return first, result


def test_the_definitions_are_asked_for_on_the_first_prompt_and_spliced():
    fixed_size = "(self):\n    return area(self.r) * 2.0\n\n\ndef extra():\n    pass\n```"
    backend = Answers(
        edit={
            "Shape.size": fixed_size,  # then a definition it was not asked for: cut
            "Shape.grow": "(self, k):\n    self.r = self.r * k\n",  # no closing fence
            "describe": "garbage (\n```",  # not a definition: the rejected one stays
        }
    )
    src = decode_source(ORIGINAL.encode(), "shapes.py")
    first, result = _failed(backend, src, REJECTED)
    retry = repair_request(backend, first, result)
    assert names(retry.plan) == ["Shape.size", "Shape.grow", "describe"]
    assert retry.first is first.conversation and retry.source is first.source
    generation = generate(backend, retry)
    size, grow, describe = backend.seen
    base = first.conversation.messages
    for request, name in zip(backend.seen, names(retry.plan), strict=True):
        msgs = request.conversation.messages
        assert msgs[:-1] == base[:-1]
        assert msgs[-1]["content"] == base[-1]["content"] + REPAIR_PART_NOTE.format(
            feedback=FAILURE, name=name
        )
        assert request.conversation.opening.startswith(first.conversation.opening)
        assert set(UNIT_STOPS) <= set(request.config.stop_strings)
        assert len(request.config.stop_strings) <= 4  # what an OpenAI server takes
    assert size.conversation.opening.endswith("```python\n@property\ndef size")
    rejected_size = "@property\ndef size(self):\n    return area(self.r) * 2\n"
    assert size.conversation.reference == rejected_size
    assert grow.conversation.opening.endswith("\ndef grow")
    expected = REJECTED.replace("area(self.r) * 2\n", "area(self.r) * 2.0\n").replace(
        "self.r *= k", "self.r = self.r * k"
    )
    fixed = judge(first, generation)
    assert fixed.status is Status.CHANGED and fixed.new_text == expected
    assert generation.tokens == [3] * 9 and generation.stats.new_tokens == 9
    assert fixed.plan is retry.plan and fixed.plan.as_dict()["repair"] is True


def test_other_repairs_stay_whole_file():
    """A refusal by a check, ``--whole-file``, or a failing result no plan covers: the
    whole-file repair (the first conversation and a note; the rejected file drafted from)."""
    src = decode_source(ORIGINAL.encode(), "shapes.py")
    backend = Answers()
    first, result = _failed(backend, src, REJECTED)
    for variant, options in (
        (replace(result, test_run=None), backend.options),
        (replace(result, undefined="logger (line 3)"), backend.options),
        (result, EditOptions(parts=False)),
        (replace(result, new_text=REJECTED.replace("LIMIT = 3", "LIMIT = 4")), backend.options),
    ):
        retry = repair_request(replace(backend, options=options), first, variant)
        assert retry.plan is None
        assert retry.conversation.messages[-1]["content"].endswith(
            REPAIR_NOTE.format(feedback=FAILURE)
        )


def test_first_definition():
    code = "@cache\ndef f(x):\n    return x\n\n\ny = 2\n"
    assert first_definition(code, "python") == "@cache\ndef f(x):\n    return x\n"
    assert first_definition("class A:\n    pass\n", "python") == "class A:\n    pass\n"
    assert first_definition("y = 2\ndef f():\n    pass\n", "python") is None
    assert first_definition("def f(:\n    pass\n", "python") is None
    assert first_definition("def size", "python") is None  # the header, nothing after it


def test_traceback_column_markers_are_dropped_from_the_feedback():
    out = (
        'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
        "    assert f(x) == 2\n           ^^^^\n    return a[5].b\n           ~~~~^^^\n"
        "AssertionError\n"
    )
    assert bounded_output(out) == (
        'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
        "    assert f(x) == 2\n    return a[5].b\nAssertionError"
    )


@pytest.mark.real
def test_the_real_model_repairs_one_definition_and_keeps_the_rest(embedded):
    """The embedded model asked again for ``Shape.size`` and ``Shape.grow`` after a failing
    run: every line outside them is the rejected result's, each repaired definition parses,
    the prompt opens with the first attempt's (its cache rows reused), and fewer tokens are
    generated than the whole file has."""
    from adapld_cli.edit import LocalModel
    from adapld_cli.edit.syntax import first_syntax_error

    local = LocalModel(embedded, EditOptions(attempts=2))
    src = decode_source(ORIGINAL.encode(), "shapes.py")
    first, result = _failed(local, src, REJECTED)
    result.feedback = FAILURE.replace("describe", "size")
    retry = repair_request(local, first, result)
    assert names(retry.plan) == ["Shape.size", "Shape.grow"]
    generation = generate(local, retry)
    fixed = judge(first, generation)
    assert fixed.status in (Status.CHANGED, Status.UNCHANGED), fixed.message
    assert first_syntax_error(fixed.new_text, "python") is None
    new, old = fixed.new_text.splitlines(), REJECTED.splitlines()
    head, tail = retry.plan.parts[0].start - 1, len(old) - retry.plan.parts[-1].end
    assert new[:head] == old[:head] and new[len(new) - tail :] == old[len(old) - tail :]
    assert generation.stats.new_tokens < len(local.tokenizer(REJECTED)["input_ids"])
    assert generation.stats.cached_tokens >= len(first.prompt.ids) - 8
