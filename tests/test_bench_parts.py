"""The benchmark's parts on tiny models: settings overrides, the transformers baselines' stock
model, the verify-cost curve, results merging and the lossless/baseline split. No timing
asserts: the curve's numbers are checked for shape, not speed."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import types
from pathlib import Path

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
    assert parse_overrides(["graphs=none"]).graphs is None  # back to the device's default
    assert parse_overrides(["graphs=false"]).graphs is False
    for bad in ("node_budget=lots", "nope=1", "cursor=maybe", "node_budget", "top_k=lots"):
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


def _loaded(tmp_path, model, dtype):
    model.save_pretrained(tmp_path / "m")
    return types.SimpleNamespace(model=model, path=tmp_path / "m", dtype=dtype, device="cpu")


def test_stock_model_shared_when_stock_else_a_fresh_copy(tmp_path, monkeypatch):
    import torch

    from adapld_cli.model import kernels

    monkeypatch.delenv(kernels.ENV_KERNELS, raising=False)  # the default: exact
    model = tiny_model("llama", dtype="float32")
    ids = torch.tensor([random_prompt(0)])
    with torch.inference_mode():
        before = model(ids).logits
    stock = StockModel(_loaded(tmp_path, model, "float32"))
    assert stock.describe() is None
    assert is_stock(model) and stock.get() is model and stock.shared
    assert "shared" in stock.describe()

    reason = kernels.supported(model)
    if reason is not None:
        pytest.skip(f"adapld's CPU kernels cannot run here: {reason}")
    assert kernels.apply(model) == "exact"  # what adapld's loading does to its model
    assert not is_stock(model)
    copy = stock.get()
    assert copy is not model and is_stock(copy) and not stock.shared
    assert copy.dtype == model.dtype == torch.float32 and stock.get() is copy  # loaded once
    assert getattr(copy, "adapld_kernels", "stock") == "stock"
    assert isinstance(copy.lm_head, torch.nn.Linear)
    assert copy.config._attn_implementation != kernels.ATTENTION
    with torch.inference_mode():
        assert torch.equal(copy(ids).logits, before)  # the model as saved, run as transformers
    assert "from_pretrained" in stock.describe()


def test_verify_cost_curve_shape():
    model = tiny_model("gpt2")  # 1,024 positions: the context is shortened to fit
    assert fitting_context(model, 1000, 64) == 960
    passes = []  # (new tokens, cached tokens) of every forward pass, as the model sees it

    def seen(_module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids = kwargs.get("input_ids", args[0] if args else None)
        passes.append((ids.shape[-1], cache.get_seq_length()))

    hook = model.base_model.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        points = measure(model, context=1000, sizes=(1, 2, 64), repeats=2)
    finally:
        hook.remove()
    # a short warm-up prefill on a cache of its own; then the cache is filled once through
    # the engine's runner (shortened to fit the largest pass, in prefill chunks), then each
    # size runs one warm-up pass and `repeats` timed ones, every one over the same cache
    # (kept back to its length)
    prefill = [(256, 0), (256, 256), (256, 512), (192, 768)]
    assert passes == [(64, 0), *prefill] + [(n, 960) for n in (1, 2, 64) for _ in range(3)]
    assert [p.n for p in points] == [1, 2, 64]
    assert points[0].ratio == 1.0  # each ratio is its median over the n = 1 median
    assert all(p.ratio == pytest.approx(p.ms / points[0].ms) for p in points)
    text = format_curve(points, "title")
    assert text.splitlines()[:2] == ["title", "   n         ms    x n=1"]
    assert text.splitlines()[2:] == [f"{p.n:>4}  {p.ms:>9.1f}  {p.ratio:>7.2f}" for p in points]
    with pytest.raises(ValueError):
        fitting_context(model, 1000, 2000)


def test_verify_cost_curve_through_static_passes():
    """``graphs=True``: the same passes through the engine's static verify passes (every
    pass of the padded bucket size, over the same cropped-back cache)."""
    model = tiny_model("gpt2")
    passes = []

    def seen(_module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids = kwargs.get("input_ids", args[0] if args else None)
        passes.append((ids.shape[-1], cache.get_seq_length()))

    hook = model.base_model.register_forward_pre_hook(seen, with_kwargs=True)
    try:
        points = measure(model, context=100, sizes=(1, 4), repeats=2, graphs=True)
    finally:
        hook.remove()
    assert passes == [(64, 0), (100, 0)] + [(b, 100) for b in (1, 5) for _ in range(3)]
    assert [p.n for p in points] == [1, 4] and points[0].ratio == 1.0
    passes.clear()
    hook = model.base_model.register_forward_pre_hook(seen, with_kwargs=True)
    try:  # uniform: every n one pass of the default settings' shape (80 rows)
        points = measure(model, context=100, sizes=(1, 4), repeats=2, uniform=True)
    finally:
        hook.remove()
    assert passes == [(64, 0), (100, 0)] + [(80, 100)] * 6
    assert [p.n for p in points] == [1, 4]
    from adapld_cli.engine.kvcache import GrowingLayer

    keys = []
    update = GrowingLayer.update

    def update_seen(self, *args, **kwargs):
        out = update(self, *args, **kwargs)
        keys.append(out[0].shape[2])
        return out

    GrowingLayer.update = update_seen
    try:  # a key span: the passes attend 192 rows (100 + 80 rounded up to 64), not 1,024
        measure(model, context=100, sizes=(1,), repeats=1, uniform=True, span=64)
    finally:
        GrowingLayer.update = update
    assert set(keys[-2:]) == {192}


def test_cli_verify_cost_prints_the_curve(tiny_models):
    r = CliRunner().invoke(
        app, ["bench", "--verify-cost", "--model", str(tiny_models["rename"]), "--threads", "1"]
    )
    assert r.exit_code == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[2:]]
    assert [int(row[0]) for row in rows] == list(SIZES)
    assert float(rows[0][2]) == 1.0
    assert "threads=1" in r.stdout.splitlines()[0]
    r = CliRunner().invoke(
        app,
        ["bench", "--verify-cost", "--model", str(tiny_models["rename"]), "--threads", "1",
         "--set", "graphs=true"],
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "static passes" in r.stdout.splitlines()[0]
    assert [int(line.split()[0]) for line in r.stdout.splitlines()[2:]] == list(SIZES)
    r = CliRunner().invoke(
        app,
        ["bench", "--verify-cost", "--model", str(tiny_models["rename"]), "--threads", "1",
         "--set", "graphs=true", "--set", "span=64"],
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "key span 64" in r.stdout.splitlines()[0]


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
    assert doc["graph_fallbacks"] == []
    rows[2]["graph_fallback"] = "RuntimeError: capture"
    assert document({}, rows, ["ar", "hf", "adapld"])["graph_fallbacks"] == [
        "adapld on t: CUDA graph capture failed, passes ran eagerly (RuntimeError: capture)"
    ]
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


def test_interrupted_run_keeps_rows_and_exits_130(tiny_models, tmp_path):
    """Ctrl-C during a real `adapld bench` run: the rows measured so far are reported, ``meta``
    says so, exit 130. The second task's reference tests block (a script that marks that it
    runs, then sleeps), and the signal is sent once the first task's rows are reported and the
    script is running: it lands in the wait for the tests, not in whatever the bench happens
    to be doing a moment after printing a row (in full CI runs it sometimes landed before the
    script ran and the bench then did not exit within a minute)."""
    from tests.conftest import RENAMED, SOURCE
    from tests.test_panel import _finish, _spawn

    task = {"before": SOURCE, "instruction_descriptive": "Rename foo to bar.", "after": RENAMED}
    marker = tmp_path / "tests-running"
    blocks = f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(120)\n"
    rows = [{**task, "full_name": "0_rename"}, {**task, "full_name": "1_blocks", "tests": blocks}]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["bench", "--model", str(tiny_models["rename"]), "--tasks", str(tasks),
            "--methods", "ar,adapld", "--run-tests", "--test-timeout", "120", "--no-warmup",
            "--threads", "1", "--json", "-"]  # fmt: skip
    proc, chunks, reader, master = _spawn(args, {}, tmp_path)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if b"[2/4]" in b"".join(chunks) and marker.exists():  # rows reported, tests running
            break
        time.sleep(0.1)
    reported = b"[2/4]" in b"".join(chunks) and marker.exists()
    running = proc.poll() is None
    status = Path(f"/proc/{proc.pid}/status")
    sig = [x for x in status.read_text().splitlines() if x.startswith("Sig")] if running else []
    proc.send_signal(signal.SIGINT if reported else signal.SIGKILL)  # (out of time: kill)
    try:
        stdout = _finish(proc, reader, master, timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"no exit 60 s after SIGINT; the bench's signal state before it: {sig}")
    err = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", b"".join(chunks).decode("utf-8", "replace"))
    assert running and reported and "[2/4] 0_rename adapld" in err, err
    assert proc.returncode == 130, err
    assert "interrupted: reporting what was measured" in err and "Traceback" not in err
    doc = json.loads(stdout)  # the JSON report still comes out, with what was measured
    assert doc["meta"]["interrupted"] is True
    assert [(r["task"], r["method"]) for r in doc["tasks"]] == [
        ("0_rename", "ar"),
        ("0_rename", "adapld"),
    ]
    assert all(r["identical_to_ar"] and r["status"] == "changed" for r in doc["tasks"])
    assert doc["reference_pass"] == {} and doc["problems"] == []  # stopped in 1_blocks' tests
    assert doc["meta"]["instruction"] == "descriptive" and doc["meta"]["tasks_file"] == str(tasks)
    assert doc["meta"]["baseline_model"] is None and "load_average_start" in doc["meta"]
    from adapld_cli.bench.meta import cpu_isa

    assert doc["meta"]["cpu_isa"] == cpu_isa()  # e.g. AVX512+AMX: where numbers came from


def test_cli_verify_cost_over_several_contexts(tiny_models):
    """``--context`` takes several cache lengths: one table each, in order, with the prefill
    rate, the ratio to the first context's same n, and the pass's parts (the native
    attention where it runs, the LM head, the rest); a bad list is a usage error."""
    model = str(tiny_models["rename"])
    base = ["bench", "--verify-cost", "--model", model, "--threads", "1"]
    r = CliRunner().invoke(app, [*base, "--context", "100,300"])
    assert r.exit_code == 0, r.stderr
    tables = [t.splitlines() for t in r.stdout.split("\n\n")]
    assert [t[0].split("-token cache")[0].split()[-1] for t in tables] == ["100", "300"]
    assert all("tok/s" in t[0] for t in tables)
    assert tables[0][1].split() == ["n", "ms", "x", "n=1", "attention", "lm", "head", "rest"]
    assert "x first" in tables[1][1]
    for t in tables:
        assert [int(line.split()[0]) for line in t[2:]] == list(SIZES)
    r = CliRunner().invoke(app, [*base, "--context", "many"])
    assert r.exit_code == 2 and "--context" in r.stderr
