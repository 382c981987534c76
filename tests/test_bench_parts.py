"""The benchmark's parts on tiny models: settings overrides, the transformers baselines' stock
model, the verify-cost curve, results merging and the lossless/baseline split. No timing
asserts: the curve's numbers are checked for shape, not speed."""

from __future__ import annotations

import json
import re
import types

import pytest
from typer.testing import CliRunner

from adapld_cli.bench import BenchError, BenchResults, document
from adapld_cli.bench.methods import ALL_METHODS, BASELINES, HF_PLD_TOKENS, run_method
from adapld_cli.bench.stock import StockModel, is_stock
from adapld_cli.bench.verify_cost import SIZES, fitting_context, format_curve, measure
from adapld_cli.cli.app import app
from adapld_cli.engine import AdaPLDSettings, GenerationConfig
from adapld_cli.engine.methods import METHODS
from adapld_cli.engine.settings import parse_overrides
from tests.tiny_models import one_thread, random_prompt, tiny_model


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def test_method_names_come_from_the_engine():
    assert set(METHODS) <= set(ALL_METHODS)
    assert set(BASELINES) == {"hf", "hf-pld"} and BASELINES["hf-pld"] == HF_PLD_TOKENS
    assert len(set(ALL_METHODS)) == len(ALL_METHODS)


def test_parse_overrides_by_field_type():
    s = parse_overrides(["node_budget=32", "prompt_topk=true", "hidden_layer=none", "cursor=off"])
    assert s == AdaPLDSettings(node_budget=32, prompt_topk=True, hidden_layer=None, cursor=False)
    assert parse_overrides(["sim_floor=0.5"]).sim_floor == 0.5
    assert parse_overrides([]) == AdaPLDSettings()
    for bad in ("node_budget=lots", "nope=1", "cursor=maybe", "node_budget", "top_k=none"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            parse_overrides([bad])


def test_hf_plain_greedy_equals_ar_one_token_per_pass():
    model = tiny_model("qwen2")
    prompt = random_prompt(3)
    cfg = GenerationConfig(max_new_tokens=24)
    ar = run_method("ar", model, None, prompt, cfg)
    hf = run_method("hf", model, None, prompt, cfg)
    assert hf.tokens == ar.tokens and len(hf.tokens) == 24
    s = hf.stats
    assert s.method == "hf" and s.forward_passes == 24 and s.drafted_tokens == 0
    assert s.accept_hist == {1: 24} and s.lexical_steps == s.lexical_nohit_steps == 0


def _loaded(tmp_path, model):
    model.save_pretrained(tmp_path / "m")
    return types.SimpleNamespace(model=model, path=tmp_path / "m", dtype="float64", device="cpu")


def test_stock_model_shared_when_stock_else_a_fresh_copy(tmp_path):
    model = tiny_model("llama")
    stock = StockModel(_loaded(tmp_path, model))
    assert stock.describe() is None
    assert is_stock(model) and stock.get() is model and stock.shared
    assert "shared" in stock.describe()

    lin = model.model.layers[0].mlp.down_proj
    lin.forward = lambda x: lin.weight.new_zeros(*x.shape[:-1], lin.out_features)  # "kernels"
    assert not is_stock(model)
    copy = stock.get()
    assert copy is not model and is_stock(copy) and not stock.shared
    assert copy.dtype == model.dtype and stock.get() is copy  # loaded once
    assert "from_pretrained" in stock.describe()


def test_verify_cost_curve_shape():
    model = tiny_model("gpt2")  # 1,024 positions: the context is shortened to fit
    assert fitting_context(model, 1000, 64) == 960
    points = measure(model, context=1000, sizes=(1, 2, 8), repeats=2)
    assert [p.n for p in points] == [1, 2, 8]
    assert points[0].ratio == 1.0 and all(p.ms > 0 and p.ratio > 0 for p in points)
    text = format_curve(points, "title")
    assert text.splitlines()[0] == "title" and len(text.splitlines()) == 5
    with pytest.raises(ValueError):
        fitting_context(model, 1000, 2000)


def test_cli_verify_cost_prints_the_curve(tiny_models):
    r = CliRunner().invoke(
        app, ["bench", "--verify-cost", "--model", str(tiny_models["rename"]), "--threads", "1"]
    )
    assert r.exit_code == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[2:]]
    assert [int(row[0]) for row in rows] == list(SIZES)
    assert float(rows[0][2]) == 1.0
    assert "threads=1" in r.stdout.splitlines()[0]


def _row(task, method, same):
    return {
        "task": task, "method": method, "identical_to_ar": same, "first_diff": None if same else 3,
        "new_tokens": 9, "total_s": 1.0, "decode_s": 1.0, "prefill_s": 0.0, "tok_s": 9.0,
        "forward_passes": 3, "speedup_vs_ar": 1.0, "passed": None, "stop_reason": "eos",
        "accept_hist": {"3": 3}, "peak_rss_mb": None, "drafted_tokens": 0,
        "accepted_draft_tokens": 6, "lexical_steps": 0, "lexical_nohit_steps": 0,
        "lexical_accepted": 0, "semantic_steps": 0, "semantic_accepted": 0, "branch_steps": 0,
        "branch_accepted": 0,
    }  # fmt: skip


def test_baseline_differences_are_notes_engine_differences_are_problems():
    rows = [_row("t", "ar", True), _row("t", "hf", False), _row("t", "adapld", False)]
    doc = document({}, rows, ["ar", "hf", "adapld"])
    assert len(doc["problems"]) == 1 and doc["problems"][0].startswith("adapld differs")
    assert len(doc["baseline_differences"]) == 1 and "hf differs" in doc["baseline_differences"][0]
    results = BenchResults({}, ["ar", "hf"], rows[:2])
    assert results.exit_code(results.document()) == 0
    results.interrupted = True
    assert results.exit_code(results.document()) == 130


def test_merge_reports(tmp_path):
    a, b, bad = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "bad.json"
    for path, task in ((a, "t1"), (b, "t2")):
        doc = document({"command": f"run {task}", "git": "abc"}, [_row(task, "ar", True)], ["ar"])
        path.write_text(json.dumps(doc))
    merged = BenchResults.merge([a, b])
    assert [r["task"] for r in merged.rows] == ["t1", "t2"] and merged.methods == ["ar"]
    assert merged.meta["n_tasks"] == 2 and len(merged.meta["merged_from"]) == 2
    assert merged.document()["methods"]["ar"]["tasks"] == 2
    with pytest.raises(BenchError, match="repeats"):
        BenchResults.merge([a, a])
    bad.write_text("[]")
    with pytest.raises(BenchError, match="not a bench report"):
        BenchResults.merge([bad])


def test_help_has_no_type_metavars():
    r = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["bench", "--help"])
    assert r.exit_code == 0
    options = [line for line in r.stdout.splitlines() if "--" in line and "--help" not in line]
    assert options and not any(re.search(r"<(bool|str|path|int|float|list)", x) for x in options)
    assert "KEY=VALUE" in r.stdout and "--verify-cost" in r.stdout


def test_interrupted_run_keeps_rows_and_exits_130():
    """Ctrl-C during a run: the rows measured so far are reported, ``meta`` says so, exit 130."""
    from adapld_cli.bench import BenchOptions

    class Runner:
        loaded = types.SimpleNamespace(name="m", source="local", device="cpu", dtype="float32")
        tasks = ["t"]
        options = BenchOptions(methods=["ar", "adapld"])
        rows, skipped, reference_pass, warmup_s, stock = [], [], {}, 0.0, None

        def run(self):
            self.rows.append(_row("t", "ar", True))
            raise KeyboardInterrupt

    said = []
    results = BenchResults.measure(
        Runner(), tasks_file=None, instruction="lazy", on_interrupt=lambda: said.append(1)
    )
    doc = results.document()
    assert said == [1] and results.interrupted and doc["meta"]["interrupted"]
    assert [r["method"] for r in doc["tasks"]] == ["ar"] and results.exit_code(doc) == 130
    assert doc["meta"]["instruction"] == "lazy" and doc["meta"]["tasks_file"].endswith(".jsonl")
    assert doc["meta"]["baseline_model"] is None and "load_average_start" in doc["meta"]
