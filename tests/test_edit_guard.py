"""The scope guard: real tree-sitter grammars, no model."""

from __future__ import annotations

from importlib import resources

import pytest

from adapld_cli.edit.guard import (
    asks_to_delete,
    check_scope,
    describe_lost,
    file_items,
    names_in,
)

INVENTORY = resources.files("adapld_cli.data").joinpath("inventory.py").read_text("utf-8")
DOCSTRING = "add a docstring to the tagged method"
# What the embedded model wrote over the 68-line sample in the issue: a 7-line fragment.
FRAGMENT = '''def tagged(self, tag: str) -> list[Item]:
    """Items carrying `tag`.

    Returns them in insertion order.
    """
    return [item for item in self.items.values() if tag in item.tags]

'''
LONG = f'DATA = "{"x" * 8000}"\n\n\ndef size():\n    return len(DATA)\n'
LONG_EDITED = 'def size():\n    """Length of DATA."""\n    return len(DATA)\n'


def guard(before: str, after: str, instruction: str, language: str | None = "python"):
    return check_scope(before, after, language=language, instruction=instruction)


def docstring_added(text: str, method: str = "tagged") -> str:
    head = f"    def {method}(self, tag: str) -> list[Item]:\n"
    return text.replace(head, head + '        """Items carrying `tag`."""\n')


# -- the cases -------------------------------------------------------------------------
def test_fragment_over_the_sample_is_lost_with_the_exact_message():
    v = guard(INVENTORY, FRAGMENT, DOCSTRING)
    assert v.lost and v.structural and v.line_rule
    assert v.names[:3] == ("Item", "Inventory", "report")  # a lost class stands for its methods
    assert "Inventory.add" not in v.names
    assert v.names[-3:] == ("annotations", "dataclass", "field")  # imports last
    more = len(v.names) - 3
    assert v.message == (
        f"would delete Item, Inventory, report (+{more} more), which the instruction does not name"
    )
    assert v.refusal == v.message + "; nothing written (--force writes it anyway)"


def test_fragment_without_extension_is_lost_by_the_line_rule():
    v = guard(INVENTORY, FRAGMENT, DOCSTRING, language=None)
    assert v.lost and not v.structural and v.names == ()
    assert v.lines_before == 50 and v.lines_after == 5
    assert v.message == (
        "would drop 45 of 50 non-blank lines, which the instruction does not ask for"
    )


def test_lost_constant_in_long_file():
    v = guard(LONG, LONG_EDITED, "add a docstring to size")
    assert v.lost and not v.line_rule
    assert v.names == ("DATA",)
    assert v.message == "would delete DATA, which the instruction does not name"


def test_docstring_added_properly_is_fine():
    v = guard(INVENTORY, docstring_added(INVENTORY), DOCSTRING)
    assert not v.lost and v.names == () and v.message is None and v.refusal is None


def test_unchanged_file():
    v = guard(INVENTORY, INVENTORY, DOCSTRING)
    assert not v.lost and v.lines_before == v.lines_after == 50


# -- what the instruction names ----------------------------------------------------------------
def test_removal_named_in_instruction_is_allowed():
    after = INVENTORY.replace(
        "    def tagged(self, tag: str) -> list[Item]:\n"
        "        return [item for item in self.items.values() if tag in item.tags]\n",
        "",
    )
    assert guard(INVENTORY, after, "remove the tagged method").lost is False
    v = guard(INVENTORY, after, "make report shorter")
    assert v.lost and v.names == ("Inventory.tagged",)


def test_delete_the_unused_helper():
    before = "def foo():\n    return 1\n\n\ndef main():\n    print(2)\n"
    after = "def main():\n    print(2)\n"
    v = guard(before, after, "delete the unused helper foo")
    assert not v.lost and v.allowed == ("foo",)


def test_rename_named_in_instruction_is_kept():
    before = "def calc(a):\n    return a * 2\n\n\ndef main():\n    print(calc(3))\n"
    after = (
        "def compute_total(a):\n    return 2 * a\n\n\ndef main():\n    print(compute_total(3))\n"
    )
    v = guard(before, after, "rename the helper to compute_total")
    assert not v.lost and v.renamed == (("calc", "compute_total"),)
    # the same new name without asking for a rename is no rename: calc is lost
    assert guard(before, after, "use compute_total in main").names == ("calc",)


def test_rename_with_same_body_is_kept_whatever_the_instruction():
    before = "def foo(a, b):\n    return a + b\n\n\ndef main():\n    print(foo(1, 2))\n"
    after = before.replace("foo", "bar")
    v = guard(before, after, "rename")
    assert not v.lost and v.renamed == (("foo", "bar"),)


def test_renamed_class_keeps_its_methods():
    after = INVENTORY.replace("class Inventory:", "class Stock:")
    v = guard(INVENTORY, after, "rename Inventory to Stock")
    assert not v.lost and ("Inventory", "Stock") in v.renamed


def test_method_moved_to_another_class_is_lost_unless_named():
    before = "class A:\n    def f(self):\n        return 1\n\n\nclass B:\n    pass\n"
    after = "class A:\n    pass\n\n\nclass B:\n    def f(self):\n        return 1\n"
    assert guard(before, after, "tidy up the classes").names == ("A.f",)
    assert not guard(before, after, "move f to B").lost
    assert not guard(before, after, "move A.f to B").lost


def test_qualified_and_partial_names():
    assert names_in("Item.total_value", "document total_value")
    assert names_in("Item.total_value", "document Item.total_value")
    assert not names_in("Item.total_value", "document total_values")
    assert not names_in("total", "document total_value")
    assert names_in("impl Shape", "remove the Shape impl")


def test_leading_verb_is_not_a_name():
    assert not names_in("add", "add a docstring to tagged")
    assert not names_in("add", "Please add logging, then remove prints")
    assert names_in("add", "rename add to plus")
    assert names_in("Item", "Item needs a docstring")  # identifiers at the start still count


def test_duplicates_must_stay_duplicates():
    before = (
        "class C:\n    @property\n    def x(self):\n        return self._x\n\n"
        "    @x.setter\n    def x(self, v):\n        self._x = v\n"
    )
    after = "class C:\n    @property\n    def x(self):\n        return self._x\n"
    v = guard(before, after, "add a docstring to the class")
    assert v.lost and v.names == ("C.x",)
    assert not guard(before, after, "remove the x setter").lost


def test_remove_unused_imports_allows_imports_only():
    before = "import os\nimport sys\n\nLIMIT = 3\n\n\ndef f():\n    return sys.argv\n"
    after = "import sys\n\n\ndef f():\n    return sys.argv\n"
    v = guard(before, after, "remove unused imports")
    assert v.lost and v.names == ("LIMIT",) and v.allowed == ("os",)
    assert not guard(before, after, "remove dead code").lost


def test_import_alias_change_keeps_the_import():
    before = "import numpy\n\nx = numpy.zeros(3)\n"
    after = "import numpy as np\n\nx = np.zeros(3)\n"
    assert not guard(before, after, "use the np alias").lost


def test_statements_in_blocks_count_but_locals_do_not():
    before = (
        "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n\n\n"
        "def f():\n    local = 1\n    return local\n\n\n"
        "if __name__ == '__main__':\n    result = f()\n"
    )
    names = [i.name for i in file_items(before, "python")]
    assert names == ["yaml", "yaml", "f", "result"]
    after = before.replace("    local = 1\n    return local\n", "    return 1\n")
    assert not guard(before, after, "inline the variable").lost
    v = guard(before, after.replace("    result = f()\n", "    print(f())\n"), "print it")
    assert v.names == ("result",)


# -- the line rule -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("instruction", "asks"),
    [
        ("delete the tests", True), ("Remove print calls", True), ("shorten it", True),
        ("simplify report", True), ("trim whitespace", True), ("clean up the module", True),
        ("get rid of the globals", True), ("add a cutoff parameter", False),
        ("handle empty input", False), ("add a docstring", False),
    ],
)  # fmt: skip
def test_deletion_words(instruction, asks):
    assert asks_to_delete(instruction) is asks


def test_line_rule_without_grammar():
    before = "".join(f"line {i}\n" for i in range(10))
    after = "line 0\nline 1\n"
    v = guard(before, after, "fix the typo", language=None)
    assert v.lost and v.message.startswith("would drop 8 of 10 non-blank lines")
    assert not guard(before, after, "delete everything after line 1", language=None).lost
    assert not guard(before, before + "more\n", "append", language=None).lost
    assert not guard("a\nb\n", "a b\n", "join the lines", language=None).lost  # 1 line: noise
    assert guard("a\nb\n", "\n", "fix", language=None).lost  # emptied


def test_unparsable_input_skips_the_structure_check():
    before = "def f(:\n    pass\n\n\ndef g():\n    return 1\n"
    after = "def f():\n    pass\n"
    v = guard(before, after, "fix f")
    assert not v.structural and not v.lost


def test_message_builder_counts():
    assert describe_lost(["a"]) == "would delete a, which the instruction does not name"
    names = ["Item", "Inventory", "report", *"abcdef"]
    assert describe_lost(names) == (
        "would delete Item, Inventory, report (+6 more), which the instruction does not name"
    )


# -- other languages ---------------------------------------------------------------------------
JS = """import fs from "fs";
import { join, basename as bn } from "path";

export const LIMIT = 10;
const load = (p) => fs.readFileSync(join(p));

class Store {
  get(key) { return this.items[key]; }
  put(key, value) { this.items[key] = value; }
}

function main() { console.log(load(bn("x"))); }
"""

GO = """package store

import (
\t"fmt"
\t"os"
)

const Limit = 10

type Store struct{ items map[string]int }

func (s *Store) Get(key string) int { return s.items[key] }

func Main() { fmt.Println(os.Args) }
"""

RUST = """use std::collections::{HashMap, HashSet};

const LIMIT: usize = 10;

struct Store { items: HashMap<String, i32> }

impl Store {
    fn get(&self, key: &str) -> i32 { self.items[key] }
    fn put(&mut self, key: String, v: i32) { self.items.insert(key, v); }
}

fn main() {}
"""


@pytest.mark.parametrize(
    ("lang", "source", "expected"),
    [
        ("javascript", JS,
         ["fs", "join", "basename", "LIMIT", "load", "Store", "Store.get", "Store.put", "main"]),
        ("go", GO, ["fmt", "os", "Limit", "Store", "Get", "Main"]),
        ("rust", RUST,
         ["HashMap", "HashSet", "LIMIT", "Store", "impl Store", "impl Store.get",
          "impl Store.put", "main"]),
    ],
)  # fmt: skip
def test_items_of_other_languages(lang, source, expected):
    assert [i.name for i in file_items(source, lang)] == expected


def test_javascript_lost_method_and_import():
    after = JS.replace("  put(key, value) { this.items[key] = value; }\n", "").replace(
        'import fs from "fs";\n', ""
    )
    v = guard(JS, after, "add a docstring to get", language="javascript")
    assert v.names == ("Store.put", "fs")
    assert not guard(JS, after, "remove put and the fs import", language="javascript").lost


def test_go_lost_constant():
    after = GO.replace("const Limit = 10\n", "")
    v = guard(GO, after, "document Main", language="go")
    assert v.lost and v.names == ("Limit",)


def test_rust_lost_method_and_renamed_struct():
    after = RUST.replace(
        "    fn put(&mut self, key: String, v: i32) { self.items.insert(key, v); }\n", ""
    )
    assert guard(RUST, after, "make get faster", language="rust").names == ("impl Store.put",)
    renamed = RUST.replace("Store", "Cache")
    assert not guard(RUST, renamed, "rename Store to Cache", language="rust").lost


def test_c_and_cpp_items():
    c = (
        "#include <stdio.h>\n#define MAX 3\nint count = 0;\nint helper(int);\n\n"
        "int main(void) { return 0; }\n"
    )
    assert [i.name for i in file_items(c, "c")] == ["stdio.h", "MAX", "count", "helper", "main"]
    v = guard(c, c.replace("#define MAX 3\n", ""), "tidy main", language="c")
    assert v.names == ("MAX",)
    cpp = "namespace n {\nint z = 1;\nclass K { int f() { return z; } };\n}\n"
    assert [i.name for i in file_items(cpp, "cpp")] == ["n", "n.z", "n.K", "n.K.f"]


def test_moves_are_kept_when_the_instruction_asks_for_them():
    before = "def load():\n    return 1\n\n\ndef save():\n    return 2\n"
    after = (
        "class Store:\n    def load(self):\n        return 1\n\n"
        "    def save(self):\n        return 2\n"
    )
    v = guard(before, after, "wrap these functions in a Store class")
    assert not v.lost and v.renamed == (("load", "Store.load"), ("save", "Store.save"))
    assert guard(before, after, "add type hints").names == ("load", "save")


def test_method_dedented_out_of_its_class_is_lost():
    after = (
        INVENTORY.replace(
            "    def tagged(self, tag: str) -> list[Item]:\n"
            "        return [item for item in self.items.values() if tag in item.tags]\n",
            "",
        )
        + "\n\ndef tagged(self, tag: str) -> list[Item]:\n    return []\n"
    )
    v = guard(INVENTORY, after, "add a docstring to report")
    assert v.lost and v.names == ("Inventory.tagged",)


# -- data files: keys are the names --------------------------------------------------------------
CONFIG = (
    '{\n  "host": "localhost",\n  "port": 8080,\n  "db": {"user": "app", "pass": "x"},\n'
    '  "servers": [{"name": "a"}, {"name": "b"}]\n}\n'
)


def test_json_keys_lost_and_renamed():
    after = '{\n  "host": "localhost",\n  "servers": [{"name": "a"}]\n}\n'
    v = guard(CONFIG, after, "add a comment explaining each key", language="json")
    assert v.lost and v.names == ("port", "db", "servers.name")
    renamed = CONFIG.replace('"port"', '"listen_port"')
    v = guard(CONFIG, renamed, "rename port to listen_port", language="json")
    assert not v.lost and v.renamed == (("port", "listen_port"),)
    assert not guard(CONFIG, CONFIG.replace("8080", "9090"), "use 9090", language="json").lost


def test_toml_and_yaml_keys():
    toml = '[tool.ruff]\nline-length = 100\n\n[tool.ruff.lint]\nselect = ["E"]\n'
    shorter = "[tool.ruff]\nline-length = 120\n"
    v = guard(toml, shorter, "raise the line length", language="toml")
    assert v.names == ("tool.ruff.lint",)
    assert not guard(toml, shorter, "remove the lint table", language="toml").lost
    yaml = "on: [push]\njobs:\n  test:\n    steps:\n      - run: a\n      - run: b\n"
    v = guard(yaml, yaml.replace("      - run: b\n", ""), "add a job", language="yaml")
    assert v.names == ("jobs.test.steps.run",)
    assert not guard(yaml, yaml + "  lint:\n    steps: []\n", "add a job", language="yaml").lost


def test_data_file_that_does_not_parse_before_gets_only_the_line_rule():
    jsonc = '// settings\n{"a": 1, "b": 2}\n'
    v = guard(jsonc, '{"a": 1}\n', "fix", language="json")
    assert not v.structural and not v.lost


def test_reassignment_merged_into_one_is_not_lost():
    before = "import pandas as pd\n\ndf = pd.read_csv('x.csv')\ndf = df.dropna()\nprint(df)\n"
    after = "import pandas as pd\n\ndf = pd.read_csv('x.csv').dropna()\nprint(df)\n"
    assert not guard(before, after, "chain the calls").lost


def test_header_and_short_names():
    assert names_in("sys/types.h", "drop the types.h include")
    assert names_in("stdio.h", "is stdio needed?")
    assert not names_in("stdio.h", "fix the .h guard")
    assert names_in("h", "rename h to height")  # a variable called h is still a name
