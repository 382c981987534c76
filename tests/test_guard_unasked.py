"""Changes nobody asked for (:func:`check_unasked`): a rename left undone and a data table
rewritten are found, with real tree-sitter grammars; the edits that were asked are not.
The precision on real reference edits is in ``tests/test_guard_canitedit.py``."""

from __future__ import annotations

import pytest

from adapld_cli.edit.guard import check_unasked
from adapld_cli.edit.guard.unasked import rename_pairs

PY = """NAMES = {
    "gray0": 0, "gray1": 1, "grey0": 0, "grey1": 1, "red": 9, "blue": 12,
}


class Color:
    def downgrade(self, system):
        return self.number + system

    def other(self):
        return self.downgrade(1)
"""
RENAME = "Rename the method downgrade to to_system and update every call"


def check(after: str, instruction: str = RENAME, before: str = PY, lang: str = "python"):
    return check_unasked(before, after, language=lang, instruction=instruction)


@pytest.mark.parametrize(
    ("instruction", "pairs"),
    [
        (RENAME, [("downgrade", "to_system")]),
        ("rename `foo` to `bar`", [("foo", "bar")]),
        ("Rename Item.total_value to value and update every call", [("total_value", "value")]),
        ("Renaming the helper function f into g", [("f", "g")]),
        ("add a docstring to the renamer", []),
        ("rename x to x", []),
    ],
)
def test_rename_pairs(instruction, pairs):
    assert rename_pairs(instruction) == pairs


def test_rename_made_passes():
    assert check(PY.replace("downgrade", "to_system")) is None
    # a definition-only rename (its callers live in other files) is a rename too
    assert check(PY.replace("def downgrade", "def to_system"), before=PY) is None


def test_rename_not_made_is_found():
    drift = PY.replace('"gray0"', '"grey9"')  # the model changed something else instead
    assert check(drift) == "does not make the rename: `to_system` appears nowhere"
    kept = PY.replace("    def other", "    def to_system(self):\n        pass\n\n    def other")
    assert check(kept) == "does not make the rename: `Color.downgrade` (line 7) is still defined"


def test_a_rename_of_several_definitions_names_them_all_when_one_is_kept():
    """The inventory case: two methods share the old name, the answer renamed one; the reason
    names the one kept and every definition to rename (what a repair attempt needs)."""
    before = (
        "class A:\n    def total(self):\n        return 1\n\n\n"
        "class B:\n    def total(self):\n        return 2\n"
    )
    after = before.replace("def total", "def value", 1)
    reason = check(after, "Rename the method total to value", before)
    assert reason == (
        "does not make the rename: `B.total` (line 7) is still defined; there are 2 definitions "
        "named `total`: rename all of them (`A.total`, `B.total`) to `value`, and every call"
    )


def test_a_rename_that_renames_another_definition_too_is_found():
    both = PY.replace("downgrade", "to_system").replace("def other", "def to_system_other")
    assert check(both) == "renames or removes `other`, which the instruction does not name"


def test_rename_of_a_name_the_file_does_not_define_is_not_checked():
    other = "def f():\n    return 1\n"
    assert check(other.replace("1", "2"), before=other) is None


def test_table_rewritten_is_found():
    drift = PY.replace('"gray1"', '"grey1"', 1).replace("return self.number", "return 0")
    assert check(drift, "make downgrade return 0") == (
        "changes the data of `NAMES`, which the instruction does not name"
    )


@pytest.mark.parametrize(
    "instruction",
    ["add purple to NAMES", "fix the typo in the color names", "add an entry for purple"],
)
def test_table_change_that_was_asked_passes(instruction):
    assert check(PY.replace('"blue": 12', '"blue": 12, "purple": 5'), instruction) is None


def test_small_assignment_is_not_a_table():
    before = "LIMIT = 10\n\ndef f():\n    return LIMIT\n"
    assert check(before.replace("10", "20"), "make f return more", before) is None


def test_javascript_rename_not_made():
    js = "function load(x) {\n  return x + 1;\n}\nconst y = load(2);\n"
    assert check(js.replace("x + 1", "x + 2"), "rename load to fetch", js, "javascript") == (
        "does not make the rename: `fetch` appears nowhere"
    )
    assert check(js.replace("load", "fetch"), "rename load to fetch", js, "javascript") is None


def test_no_grammar_or_unparsable_file_finds_nothing():
    assert check("a b c\n", RENAME, "x y z\n", None) is None
    assert check(PY, RENAME, "def (:\n") is None
