"""Big files part by part (:mod:`adapld_cli.edit.plan`, :mod:`adapld_cli.edit.parts`): the
plan, with the real tree-sitter grammar; the splice, every byte outside the parts kept; a
rename made without the model; and the embedded model editing a function of a real 621-line
module (``rich/color.py``) through its parts."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import pytest

from adapld_cli.edit import EditOptions, decode_source, prepare
from adapld_cli.edit.judge import Status, judge
from adapld_cli.edit.parts import generate, planned, reindent
from adapld_cli.edit.plan import MIN_LINES, plan_parts, rename_only
from adapld_cli.edit.prompt import load_template
from adapld_cli.edit.request import Generation
from adapld_cli.engine.types import Stats


def module(n_functions: int = 60) -> str:
    """A module of more than :data:`MIN_LINES` lines: imports, a table, functions, a class."""
    head = "import os\nimport sys\n\nLIMIT = 10\n\n\n"
    funcs = "".join(
        f"def f{i}(x):\n    y = x + {i}\n    return helper(y)\n\n\n" for i in range(n_functions)
    )
    cls = (
        "class Store:\n"
        '    """A store."""\n\n'
        "    kind = 'plain'\n\n"
        "    @property\n"
        "    def size(self):\n        return len(os.listdir('.'))\n\n"
        "    def load(self, path):\n        return helper(path)\n\n\n"
    )
    tail = "def helper(v):\n    return v\n\n\nif __name__ == '__main__':\n    sys.exit(f0(1))\n"
    return head + funcs + cls + tail


def names(plan) -> list[str]:
    return [p.name for p in plan.parts]


def test_the_module_is_big_enough():
    assert len(module().splitlines()) >= MIN_LINES


def test_a_rename_of_few_uses_is_planned_with_decorators():
    text = module().replace("return helper(y)", "return y")
    plan = plan_parts(text, "python", "Rename the function helper to assist and update every call")
    assert plan is not None and names(plan) == ["Store.load", "helper"]
    plan = plan_parts(text, "python", "rename the property size to count")
    assert plan is not None and names(plan) == ["Store.size"]
    lines = text.splitlines()
    assert lines[plan.parts[0].start - 1].strip() == "@property"


def test_named_definitions_come_with_the_import_block():
    plan = plan_parts(module(), "python", "Make f3 raise ValueError when x is negative")
    assert plan is not None and names(plan) == ["imports", "f3"]
    assert plan.parts[0].start == 1 and plan.parts[0].end == 2


@pytest.mark.parametrize(
    "instruction",
    [
        "add type hints to every function",  # names nothing
        "rename kind to flavour",  # used in the class body, which no unit covers
        "add type hints to Store",  # a class with methods, none named: the whole file
        "Make the plain text helper faster",  # plain words are not names
    ],
)
def test_no_plan_means_the_whole_file(instruction):
    assert plan_parts(module(), "python", instruction) is None


def test_a_new_method_goes_after_the_class_s_last_method():
    plan = plan_parts(module(), "python", "Add a method `clear` to class `Store` that empties it")
    assert plan is not None and plan.reason == "a new method after Store.load"
    assert names(plan) == ["imports", "Store.load"] and plan.parts[1].why == "append"


def test_a_qualified_name_picks_one_of_several_alike():
    text = module().replace("def helper(v):", "class Other:\n    def load(self, path):\n"
                            "        return path\n\n\ndef helper(v):")  # fmt: skip
    plan = plan_parts(text, "python", "Make Store.load raise ValueError for an empty path")
    assert plan is not None and names(plan) == ["imports", "Store.load"]
    assert plan_parts(text, "python", "Make `load` raise ValueError") is None  # which one?


def test_top_level_calls_are_units():
    text = module().replace("return helper(y)", "return y") + "helper(3)\n"
    plan = plan_parts(text, "python", "rename helper to assist")
    assert plan is not None and names(plan)[-1] == f"line {len(text.splitlines())}"


def test_small_files_and_too_many_parts_are_rewritten_whole():
    small = module(5)
    assert len(small.splitlines()) < MIN_LINES
    assert plan_parts(small, "python", "Make f3 raise ValueError") is None
    many = " ".join(f"f{i}" for i in range(60))
    assert plan_parts(module(), "python", f"add a docstring to {many}") is None
    assert plan_parts(module(), "python", "Rename the function helper to assist") is None


def test_reindent():
    assert reindent("def f():\n    pass", "    ") == "    def f():\n        pass\n"
    assert reindent("    def f():\n\n        pass\n", "  ") == "  def f():\n\n      pass\n"


@dataclass
class Rewriter:
    """A backend that answers a part's prompt with its code rewritten by ``edit`` (the
    splice is under test here, not the model); it keeps every request it saw."""

    edit: callable
    options: EditOptions = field(default_factory=EditOptions)
    template: object = field(default_factory=lambda: load_template(None))
    context: object = None
    seen: list = field(default_factory=list)

    def generate(self, prepared, on_event=None) -> Generation:
        self.seen.append(prepared)
        answer = self.edit(prepared.source.text) + prepared.prompt.fence
        return Generation(answer, Stats(new_tokens=1), "stop_string", [7])


def test_parts_are_spliced_and_every_other_byte_is_kept():
    text = module().replace("return helper(y)", "return y")
    src = decode_source(text.encode(), "big.py")
    backend = Rewriter(lambda code: code.replace("helper", "assist"))
    instruction = "Rename helper to assist and say so in its docstring"  # not a rename only
    prepared = planned(backend, prepare(backend, src, instruction))
    assert not prepared.plan.mechanical
    generation = generate(backend, prepared)
    assert [p.source.text.splitlines()[0] for p in backend.seen] == [
        "def load(self, path):",  # dedented
        "def helper(v):",
    ]
    assert "only `Store.load` (lines" in backend.seen[0].instruction
    result = judge(prepared, generation)
    assert result.status is Status.CHANGED and result.plan is prepared.plan
    assert result.new_text == text.replace("helper", "assist")
    assert generation.tokens == [7, 7] and generation.stats.new_tokens == 2


@pytest.mark.parametrize(
    ("instruction", "only"),
    [
        ("Rename helper to assist", True),
        ("Rename the function `helper` to `assist` (shorter) and update every call.", True),
        ("rename helper to assist and update every place that calls it", True),
        ("Rename helper to assist and add a docstring to it", False),
        ("rename helper to assist, then make it faster", False),
    ],
)
def test_rename_only(instruction, only):
    assert rename_only(instruction) is only


def test_a_rename_only_is_made_without_the_model():
    text = module().replace("return helper(y)", "return y") + "helpers = [1]\n"
    src = decode_source(text.encode(), "big.py")
    backend = Rewriter(lambda code: pytest.fail("the model was asked"))
    prepared = planned(backend, prepare(backend, src, "Rename helper to assist"))
    assert prepared.plan.mechanical and prepared.plan.renames == (("helper", "assist"),)
    result = judge(prepared, generate(backend, prepared))
    assert result.status is Status.CHANGED and result.stats.new_tokens == 0
    assert result.new_text == text.replace("helper(", "assist(")  # whole words only
    assert result.new_text.endswith("helpers = [1]\n")


def test_a_part_that_breaks_the_file_is_refused_as_a_whole():
    text = module()
    src = decode_source(text.encode(), "big.py")
    backend = Rewriter(lambda code: code.replace("return", "return ("))
    prepared = planned(backend, prepare(backend, src, "Make f3 raise ValueError"))
    result = judge(prepared, generate(backend, prepared))
    assert result.status is Status.REFUSED and "does not parse" in result.message


def test_an_import_block_answer_with_more_than_imports_is_dropped():
    text = module()
    src = decode_source(text.encode(), "big.py")

    def edit(code: str) -> str:
        if code.startswith("import os"):  # the import block: an import, and code that is not
            return code + "import re\n\nclass Store:\n    def clear(self):\n        pass\n"
        return code.replace("return helper(y)", "return helper(y) or 0")

    backend = Rewriter(edit)
    prepared = planned(backend, prepare(backend, src, "Make f3 raise ValueError"))
    result = judge(prepared, generate(backend, prepared))
    assert result.status is Status.CHANGED
    assert result.new_text.startswith("import os\nimport sys\n\nLIMIT")  # block kept as it was
    assert "return helper(y) or 0" in result.new_text
    ok = Rewriter(lambda code: code + "import re\n" if code.startswith("import os") else code)
    prepared = planned(ok, prepare(ok, src, "Make f3 raise ValueError"))
    assert judge(prepared, generate(ok, prepared)).new_text.startswith(
        "import os\nimport sys\nimport re\n"
    )


def test_whole_file_option_and_repairs_have_no_plan():
    src = decode_source(module().encode(), "big.py")
    backend = Rewriter(lambda code: code, EditOptions(parts=False))
    assert planned(backend, prepare(backend, src, "Make f3 raise ValueError")).plan is None


@pytest.mark.real
def test_rich_color_error_case_through_parts():
    """A real 621-line module: the model rewrites the two parts the instruction names (the
    import block and ``blend_rgb``), and nothing outside them changes."""
    from adapld_cli.bench.tasks import module_source
    from adapld_cli.edit import LocalModel
    from adapld_cli.edit.run import edit_file
    from adapld_cli.model import load

    text = module_source("rich.color")
    if text is None or "\ndef blend_rgb(" not in text:
        pytest.skip("this rich has no blend_rgb")
    src = decode_source(text.encode(), "color.py")
    local = LocalModel(load(device="cpu"), EditOptions(attempts=1))
    instruction = "Make `blend_rgb` raise ValueError when `cross_fade` is below 0 or above 1."
    result = edit_file(local, src, instruction)
    assert result.status is Status.CHANGED, result.message
    assert [p.name for p in result.plan.parts] == ["imports", "blend_rgb"]
    assert "raise ValueError" in result.new_text
    spans = [(p.start - 1, p.end) for p in result.plan.parts]
    for op, a, b, _, _ in difflib.SequenceMatcher(
        None, text.splitlines(), result.new_text.splitlines()
    ).get_opcodes():
        if op != "equal":
            assert any(s <= a and b <= e for s, e in spans), (op, a, b)
    assert 0 < result.stats.new_tokens < 1500  # the parts, not the file's ~5,800 tokens


def test_a_file_too_long_for_the_context_is_edited_by_its_parts(tiny_tokenizer):
    """Whole, the file does not fit the model's context; a plan's parts do, and are edited
    (a random model: the answer is noise, but it is generated and judged, not refused as
    input), with no repair attempt (there is no whole-file prompt to repair from)."""
    from types import SimpleNamespace

    from adapld_cli.edit import LocalModel
    from adapld_cli.edit.errors import TooLongError
    from adapld_cli.edit.parts import prepare_edit
    from adapld_cli.edit.run import edit_file
    from tests.test_bench import _random_model

    text = module()
    n = len(tiny_tokenizer(text, add_special_tokens=False)["input_ids"])
    model = _random_model(tiny_tokenizer, positions=n + 16)
    local = LocalModel(SimpleNamespace(model=model, tokenizer=tiny_tokenizer), EditOptions())
    src = decode_source(text.encode(), "big.py")
    instruction = "Make f3 raise ValueError when x is negative"
    with pytest.raises(TooLongError, match="too long for the model's context"):
        prepare(local, src, instruction)
    with pytest.raises(TooLongError):
        prepare_edit(local, src, "add type hints to every function")  # no plan: still too long
    prepared = prepare_edit(local, src, instruction)
    assert [p.name for p in prepared.plan.parts] == ["imports", "f3"]
    assert prepared.conversation is None
    result = edit_file(local, src, instruction)
    assert result.plan is not None and result.attempts == 1
    assert result.status in (Status.CHANGED, Status.UNCHANGED, Status.REFUSED)
