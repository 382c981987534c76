"""`adapld bench` on tiny models: every method identical to ar under greedy, reports written."""

from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from adapld_cli.bench import (
    ALL_METHODS,
    BenchError,
    BenchOptions,
    BenchRunner,
    document,
    load_tasks,
    markdown,
    parse_methods,
    testrun,
)
from adapld_cli.cli.app import app

from .conftest import SOURCE

SUMMARY_KEYS = {
    "tasks", "new_tokens", "total_s", "tok_s", "decode_tok_s", "speedup_vs_ar",
    "forward_passes", "mean_accepted", "identical_to_ar",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread; on a loaded machine more threads thrash."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _write_tasks(path, n=2):
    rows = [
        {
            "full_name": f"{i}_rename",
            "before": SOURCE,
            "instruction_descriptive": f"Rename foo to bar (variant {i}).",
            "after": SOURCE.replace("foo", "bar"),
            "tests": "assert bar(1, 2) == 3\n",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_failing_assert_is_told_what_it_compared():
    """The verdict is plain Python's; a failure's words are pytest's (its asserts rewritten),
    told the same way each time."""
    code = "def double(x):\n    return x + 1\n"
    tests = "### START TESTS ###\nif True:\n    assert double(3) == 6\n"
    run = testrun.run(code, tests, timeout=30)
    assert not run.passed and run.exit_code == 1
    assert "assert 4 == 6" in run.output and "where 4 = <function double>(3)" in run.output
    assert testrun.run(code.replace("x + 1", "2 * x"), tests, timeout=30).passed
    crash = testrun.run(code, "import sys\nsys.exit(3)\n", timeout=30)
    assert (
        crash.exit_code == 3 and not crash.passed
    )  # the verdict is Python's, whatever pytest says


def test_builtin_suite_is_sound():
    """The shipped tasks: each reference solution passes its tests and the original fails."""
    tasks = load_tasks()
    assert len(tasks) >= 5
    assert len({t.name for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.after and t.tests and t.instruction
        assert testrun.passes(t.after, t.tests, timeout=20), t.name
        assert not testrun.passes(t.before, t.tests, timeout=20), t.name


def test_cli_all_methods_identical_on_scripted_model(tiny_models, tmp_path):
    tasks = _write_tasks(tmp_path / "tasks.jsonl")
    md, png = tmp_path / "bench.md", tmp_path / "bench.png"
    r = CliRunner(env={"COLUMNS": "160"}).invoke(
        app,
        [
            "bench", "--model", str(tiny_models["rename"]), "--tasks", str(tasks),
            "--methods", "all", "--json", "-", "--markdown", str(md), "--plot", str(png),
            "--run-tests", "--max-new-tokens", "64", "--threads", "1",
            "--save-outputs", str(tmp_path / "out"),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout carries only the JSON document
    assert list(doc["methods"]) == list(ALL_METHODS)
    for name, s in doc["methods"].items():
        assert set(s) >= SUMMARY_KEYS, name
        assert s["tasks"] == 2 and s["identical_to_ar"] == 2, name
        assert s["pass_at_1"] == 1.0, name
        assert s["new_tokens"] > 0 and s["forward_passes"] > 0
    assert doc["methods"]["ar"]["mean_accepted"] == 1.0
    assert doc["methods"]["ar"]["speedup_vs_ar"] == 1.0
    assert len(doc["tasks"]) == 2 * len(ALL_METHODS)
    assert all(row["status"] == "changed" for row in doc["tasks"])
    assert doc["problems"] == []
    assert "| adapld |" in md.read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "0_rename.adapld.py").read_text() == SOURCE.replace("foo", "bar")
    assert "speedup" in r.stderr and "adapld-no-cursor" in r.stderr  # tables on stderr

    # --from-json: report again from saved results (halves merge; repeats are refused)
    half = {**doc, "tasks": [row for row in doc["tasks"] if row["task"] == "0_rename"]}
    rest = {**doc, "tasks": [row for row in doc["tasks"] if row["task"] != "0_rename"]}
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for f, part in zip(files, (half, rest), strict=True):
        f.write_text(json.dumps(part))
    args = ["bench", "--from-json", str(files[0]), "--from-json", str(files[1]), "--json", "-"]
    r2 = CliRunner().invoke(app, args)
    assert r2.exit_code == 0, r2.stderr
    assert json.loads(r2.stdout)["methods"] == doc["methods"]
    r3 = CliRunner().invoke(app, [*args[:3], *args[1:3], "--json", "-"])
    assert r3.exit_code == 2 and r3.stdout == ""
    assert "repeats" in r3.stderr


@pytest.mark.parametrize(("script", "attempts", "first", "last"), [
    ("broken", 2, "refused", "refused"),  # asked again, refused again (the answer is scripted)
    ("rename", 2, "changed", "changed"),  # accepted: not asked again
])  # fmt: skip
def test_attempts_repair_and_count_per_method(tiny_models, tmp_path, script, attempts, first,
                                              last):  # fmt: skip
    """``--attempts``: each method repairs as ``adapld edit`` does; the report counts the
    attempts, the refusals first and last, and pass@1 of the first attempt and the last;
    every attempt of every lossless method equals ar's."""
    tasks = _write_tasks(tmp_path / "tasks.jsonl")
    md = tmp_path / "bench.md"
    r = CliRunner(env={"COLUMNS": "160"}).invoke(
        app,
        [
            "bench", "--model", str(tiny_models[script]), "--tasks", str(tasks),
            "--methods", "ar,pld,adapld", "--json", "-", "--markdown", str(md), "--run-tests",
            "--max-new-tokens", "64", "--threads", "1", "--attempts", str(attempts),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    repaired = 2 if first != "changed" else 0
    for name, s in doc["methods"].items():
        assert s["identical_to_ar"] == 2 and doc["problems"] == [], name
        assert s["repaired"] == repaired and s["attempts"] == 2 + repaired, name
        assert s["first_refused"] == (2 if first == "refused" else 0), name
        assert s["refused"] == (2 if last == "refused" else 0), name
        assert s["pass_at_1_first"] == s["pass_at_1"] == (1.0 if last == "changed" else 0.0)
    for row in doc["tasks"]:
        assert (row["first_status"], row["status"]) == (first, last)
        assert row["attempts"] == (attempts if repaired else 1)
    if repaired:  # the second attempt's tokens are counted too
        ar = [row for row in doc["tasks"] if row["method"] == "ar"]
        assert all(row["forward_passes"] == row["new_tokens"] for row in ar)
    quality = md.read_text().split("\n\n")[2].splitlines()
    assert quality[0].startswith("| method | tested | pass@1 first | pass@1 | refused first/last")
    refused = f"{2 if first == 'refused' else 0}/{2 if last == 'refused' else 0}"
    assert quality[2].split(" | ")[4] == refused
    assert "quality" in r.stderr


def test_test_feedback_reports_pass_at_k(tiny_models, tmp_path):
    """``--test-feedback``: the task's tests judge each changed result; one they fail is asked
    for again (with their output) and the report gives pass@k with feedback, k = 1 plain."""
    passing = _write_tasks(tmp_path / "tasks.jsonl")
    failing = tmp_path / "failing.jsonl"
    failing.write_text(passing.read_text().replace("== 3", "== 4"))

    def bench(model, path, methods):
        r = CliRunner().invoke(
            app,
            [
                "bench", "--model", str(tiny_models[model]), "--tasks", str(path),
                "--methods", methods, "--json", "-", "--run-tests", "--test-feedback",
                "--attempts", "2", "--max-new-tokens", "64", "--threads", "1",
            ],
        )  # fmt: skip
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)

    for path, expected in ((passing, {"1": 1.0}), (failing, {"1": 0.0, "2": 0.0})):
        doc = bench("rename", path, "ar,adapld")
        for name, s in doc["methods"].items():
            assert s["pass_at_k_feedback"] == expected, name
            assert s["identical_to_ar"] == 2, name  # repairs reuse the first prefill
            assert (s["repair_time_ratio"] is None) == (len(expected) == 1), name
        for row in doc["tasks"]:
            assert row["passed_at"] == (1 if expected["1"] else None)
            assert row["attempts"] == len(row["attempt_s"]) == len(expected)
            # the scripted rename fails the tests: its repair shows it as the file to fix
            assert row["attempt_kinds"] == ["whole", "fix"][: len(expected)]
            verdicts = ["passed"] if expected["1"] else ["refused: tests failed (exit 1: "] * 2
            got = row["attempt_results"]
            assert len(got) == len(verdicts), got
            assert all(g.startswith(w) for g, w in zip(got, verdicts, strict=True)), got
    # an unchanged answer fails the tests as the original does: asked again with their output
    for row in bench("same", passing, "adapld")["tasks"]:
        assert row["attempts"] == 2 and row["passed_at"] is None, row
        assert all(v.startswith("refused: tests failed (") for v in row["attempt_results"]), row
    r = CliRunner().invoke(app, ["bench", "--test-feedback", "--tasks", str(passing)])
    assert r.exit_code == 2 and "--test-feedback needs --run-tests" in r.stderr


def test_parts_rows_beside_whole_file_rows(tiny_tokenizer, tmp_path):
    """``--parts``: a big file's task runs each method on its plan's parts too (rows
    ``<method>/parts``, the plan recorded, the parts' outputs alike for every method); the
    report pairs them with the whole-file rows and counts changes outside ``touches``."""
    from tests.test_edit_parts import module

    loaded = SimpleNamespace(
        model=_random_model(tiny_tokenizer, positions=16384), tokenizer=tiny_tokenizer
    )
    row = {
        "name": "big",
        "before": module(),
        "instruction": "Make f3 raise ValueError when x is negative",
        "touches": ["f3"],
    }
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(row) + "\n")
    tasks = load_tasks(path)
    assert tasks[0].touches is None  # only module rows carry touches
    tasks = [dataclasses.replace(tasks[0], touches=("f3",))]
    out = tmp_path / "out"
    opts = BenchOptions(
        methods=["ar", "adapld"], max_new_tokens=24, warmup=False, parts=True,
        save_outputs=str(out),
    )  # fmt: skip
    rows = BenchRunner(loaded, tasks, opts).run()
    assert [r["method"] for r in rows] == ["ar", "adapld", "ar/parts", "adapld/parts"]
    for r in rows[2:]:
        assert [p["name"] for p in r["plan"]["parts"]] == ["imports", "f3"]
        assert r["new_tokens"] <= 2 * 24
    assert (out / "big.ar-parts.py").read_text() == (out / "big.adapld-parts.py").read_text()
    doc = document({}, rows, opts.labels)
    parts = doc["methods"]["adapld/parts"]
    assert parts["planned"] == 1 and parts["tokens_vs_whole"] is not None
    assert "unrelated" in parts
    quality = markdown(doc).split("\n\n")[2].splitlines()
    assert "| s vs whole |" in quality[0] and quality[-1].startswith("| adapld/parts | ")
    only = dataclasses.replace(opts, methods=["adapld"], whole=False, save_outputs=None)
    assert only.labels == ["adapld/parts"]
    rows = BenchRunner(loaded, tasks, only).run()
    assert [r["method"] for r in rows] == ["adapld/parts"] and rows[0]["plan"] is not None
    # a rename and nothing else: made without the model, no token, still timed and judged
    renamed = dataclasses.replace(tasks[0], instruction="Rename f3 to g3", touches=("f3", "g3"))
    rows = BenchRunner(loaded, [renamed], only).run()
    assert rows[0]["plan"]["mechanical"] and rows[0]["new_tokens"] == 0
    assert rows[0]["status"] == "changed" and rows[0]["unrelated"] == []


def _random_model(tokenizer, positions: int = 4096):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg).to(torch.float64).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def test_runner_random_model_all_identical(tiny_tokenizer, tmp_path):
    """A random float64 model: drafts mostly fail, and every method still matches ar."""
    loaded = SimpleNamespace(model=_random_model(tiny_tokenizer), tokenizer=tiny_tokenizer)
    tasks = load_tasks(_write_tasks(tmp_path / "t.jsonl"))
    opts = BenchOptions(methods=list(ALL_METHODS), max_new_tokens=40, warmup=False)
    runner = BenchRunner(loaded, tasks, opts)
    rows = runner.run()
    doc = document({}, rows, opts.methods)
    for name, s in doc["methods"].items():
        assert s["identical_to_ar"] == 2, (name, doc["problems"])
        assert s["new_tokens"] == 80
    for name in ("hf-pld", "pld", "adapld"):  # drafts were both accepted and rejected
        s = doc["methods"][name]
        assert s["drafted_tokens"] > s["accepted_draft_tokens"] > 0, name
    _check_markdown(markdown(doc), doc)


def test_warm_up_runs_every_key_span_before_the_first_task(tiny_tokenizer, tmp_path):
    """With static passes of one shape in key spans, the warm-up runs (on a GPU: captures) a
    pass of every span the caches can reach, so no task runs a span first; outputs = ar."""
    from adapld_cli.engine import AdaPLDSettings, Workspaces

    model = _random_model(tiny_tokenizer)
    loaded = SimpleNamespace(model=model, tokenizer=tiny_tokenizer)
    tasks = load_tasks(_write_tasks(tmp_path / "t.jsonl"))
    settings = AdaPLDSettings(uniform=True, planes=True, span=64)
    opts = BenchOptions(methods=["ar", "adapld"], max_new_tokens=40, settings=settings)
    runner = BenchRunner(loaded, tasks, opts)
    spans, prepare = {}, Workspaces.prepare

    def record(self):
        ran = prepare(self)
        spans.update({k: set(ws.static._buckets) for k, ws in self.of(model).items()})
        return ran

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Workspaces, "prepare", record)
        doc = document({}, runner.run(), opts.methods)
    assert doc["methods"]["adapld"]["identical_to_ar"] == 2
    assert len(spans) == 2  # ar's workspace and adapld's (it hooks a layer)
    for key, ws in runner.workspaces.of(model).items():
        assert set(ws.static._buckets) == spans[key]  # no task ran a span the warm-up had not
        assert len({s for _, s in spans[key]}) > 1


def _check_markdown(text, doc):
    """The report's three tables: every method and task, with the summary's numbers (timing
    cells only checked for their format)."""
    methods = list(ALL_METHODS)
    tables = [
        [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]
        for block in text.rstrip("\n").split("\n\n")
    ]
    assert len(tables) == 3 and all(t[1] == ["---"] * len(t[0]) for t in tables)
    speed, draft, per_task = (t[2:] for t in tables)
    assert tables[0][0] == ["method", "tasks", "tokens", "e2e s", "tok/s", "decode tok/s",
                            "speedup", "median", "= ar", "pass@1"]  # fmt: skip
    assert [row[0] for row in speed] == [row[0] for row in draft] == methods
    for row in speed:
        assert row[1:3] == ["2", "80"] and row[8:] == ["2/2", "-"], row  # no --run-tests
        assert all(re.fullmatch(r"\d+\.\d+x?", cell) for cell in row[3:8]), row
    assert speed[0][6:8] == ["1.00x", "1.00x"]  # ar against itself
    assert tables[1][0] == ["method", "F", "T", "draft acc", "no-hit", "sem steps/acc",
                            "branch steps/acc", "host ms/pass", "peak MiB"]  # fmt: skip
    for row in draft:
        s = doc["methods"][row[0]]
        assert row[1:3] == [str(s["forward_passes"]), f"{s['mean_accepted']:.2f}"], row
        if s["drafted_tokens"]:
            rates = f"{s['draft_acceptance']:.0%}", f"{s['lexical_nohit_rate']:.0%}"
            assert tuple(row[3:5]) == rates, row
        assert row[5] == f"{s['semantic_steps']}/{s['semantic_accepted']}", row
        assert row[6] == f"{s['branch_steps']}/{s['branch_accepted']}", row
        # the engine's own work per pass: measured for adapld's methods, not for transformers'
        if row[0] in ("hf", "hf-pld"):
            assert row[7] == "-" and s["host_ms_per_pass"] is None, row
        else:
            assert re.fullmatch(r"\d+\.\d\d", row[7]), row
            assert 0 < s["host_ms_per_pass"] < s["decode_s"] / s["forward_passes"] * 1e3, row
    for row, name in zip(draft, ("ar", "hf"), strict=False):  # one token per pass, no drafts
        assert row[:7] == [name, "80", "1.00", "-", "-", "0/0", "0/0"]
    assert tables[2][0] == ["task", "tokens", *[f"{m} x (T)" for m in methods]]
    assert [row[:3] for row in per_task] == [["0_rename", "40", "1.00x (1.0)"],
                                             ["1_rename", "40", "1.00x (1.0)"]]  # fmt: skip
    for row in per_task:  # no "**≠ar**" mark: every output equals ar's
        assert all(re.fullmatch(r"\d+\.\d\dx \(\d+\.\d\)", cell) for cell in row[2:]), row


def test_parse_methods():
    assert parse_methods(None) == ["ar", "hf", "hf-pld", "pld", "adapld"]
    assert parse_methods("adapld, ar,adapld") == ["adapld", "ar"]
    with pytest.raises(BenchError):
        parse_methods("ar,fast")


def test_ablations_and_variants_settings():
    from adapld_cli.bench.methods import VARIANT_METHOD, settings_for
    from adapld_cli.engine import AdaPLDSettings

    assert settings_for("adapld").semantic is None  # device default: CUDA only
    assert settings_for("adapld-semantic").semantic is True  # the CPU comparison
    assert settings_for("adapld-no-semantic").semantic is False
    assert settings_for("adapld-no-branches").branches is False
    assert settings_for("adapld-no-recycle").recycle is False
    assert settings_for("adapld").pass_topk is None and settings_for("adapld-pass-topk").pass_topk
    assert settings_for("hf") is None and "adapld-semantic" in parse_methods("all")
    uniform = AdaPLDSettings(uniform=True)
    assert settings_for("ar", uniform) is uniform and settings_for("pld", uniform) is uniform
    # static passes: the device's default, or forced either way for ar and adapld alike
    assert settings_for("adapld").graphs is None
    variants = {"adapld-graphs": True, "ar-graphs": True, "adapld-eager": False,
                "ar-eager": False, "adapld-buckets": True, "ar-buckets": True}  # fmt: skip
    for name, graphs in variants.items():
        assert settings_for(name).graphs is graphs and name in parse_methods("all")
    # passes of several sizes: not uniform even on CUDA; the others keep the device default
    assert not settings_for("adapld-buckets").uniform_passes("cuda")
    assert settings_for("ar-graphs").uniform_passes("cuda")
    assert VARIANT_METHOD["ar-buckets"] == "ar" and "adapld-buckets" not in VARIANT_METHOD
    chains = settings_for("adapld-chains")  # single chains, uniform without planes on CUDA
    assert chains.uniform_passes("cuda") and not chains.key_planes("cuda")
    assert chains.branches is False and chains.semantic is False


def test_static_passes_are_the_cuda_default():
    from adapld_cli.engine import AdaPLDSettings

    default = AdaPLDSettings()
    assert default.static_passes("cuda") and not default.static_passes("cpu")
    assert not default.static_passes("mps")
    assert AdaPLDSettings(graphs=True).static_passes("cpu")
    assert not AdaPLDSettings(graphs=False).static_passes("cuda")
    assert AdaPLDSettings(graphs=False, uniform=True).static_passes("cpu")  # uniform implies it


def test_uniform_passes_with_key_planes_are_the_cuda_default():
    """On CUDA the static passes are of one shape with key planes (exact there: bucketed
    passes were not); eager passes stay eager; a CPU keeps its dynamic passes."""
    from adapld_cli.engine import AdaPLDSettings

    default = AdaPLDSettings()
    assert default.uniform_passes("cuda") and default.key_planes("cuda")
    assert not default.uniform_passes("cpu") and not default.key_planes("cpu")
    eager = AdaPLDSettings(graphs=False)
    assert not eager.uniform_passes("cuda") and not eager.key_planes("cuda")
    assert not AdaPLDSettings(graphs=True).uniform_passes("cpu")  # static, sized, on a CPU
    buckets = AdaPLDSettings(uniform=False)
    assert buckets.static_passes("cuda") and not buckets.key_planes("cuda")
    assert not AdaPLDSettings(planes=False).key_planes("cuda")
    forced = AdaPLDSettings(uniform=True)
    assert forced.uniform_passes("cpu") and not forced.key_planes("cpu")
    assert AdaPLDSettings(uniform=True, planes=True).key_planes("cpu")


def test_bad_input_exits_2_before_loading(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction_descriptive": "x"}\n')
    missing = tmp_path / "missing.jsonl"
    known = ", ".join(ALL_METHODS)
    both = "only one of --json and --markdown can go to stdout ('-')"
    for args, message in (
        (["--methods", "ar,warp"], f"--methods: unknown method 'warp' (choose from {known}, all)"),
        (["--tasks", str(bad)], f"{bad}:1: missing the 'before' text"),
        (["--tasks", str(missing)], f"--tasks {missing}: cannot read (No such file or directory)"),
        (["--set", "node_budget=lots"], "--set node_budget=lots: bad value for node_budget (int)"),
        (["--json", "-", "--markdown", "-"], both),
    ):  # fmt: skip
        r = CliRunner().invoke(app, ["bench", *args, "--model", str(tmp_path / "no-such-model")])
        assert r.exit_code == 2, (args, r.output)
        assert r.stdout == ""
        assert r.stderr == f"adapld: error: {message}\n"  # one line, however long; no model
