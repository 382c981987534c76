"""The scripts in scripts/gpu/ that a later session runs on a lent device work here first: the
GPU profile (``scripts/gpu/gpu_profile.py``) and the tree-vs-steps exactness probe
(``scripts/gpu/gpu_exact.py``) on tiny models on the CPU, and the check script parses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from tests.tiny_models import one_thread, random_prompt, tiny_model

GPU = Path(__file__).resolve().parents[1] / "scripts" / "gpu"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_profile_profiles_ar_steps_and_adapld_passes(tmp_path):
    gpu_profile = _script("gpu_profile")
    model = tiny_model("qwen2")
    prompt = random_prompt(1)
    with one_thread():
        ar = gpu_profile.profile_method(model, prompt, "ar", 6, warmup=2, trace=tmp_path / "t.json")
        ad = gpu_profile.profile_method(model, prompt, "adapld", 4, warmup=1)
    assert (ar["events"], ar["tokens"]) == (6, 6)  # one token a plain step
    assert ad["events"] == 4 and ad["tokens"] > 4  # passes that accepted drafts
    assert (tmp_path / "t.json").stat().st_size > 0
    text = gpu_profile.report(ad)
    assert text.startswith("== adapld: 4 events") and "aten::" in text
    assert ar["syncs_per_event"] == {}  # no CUDA here
    assert set(ad["phase_ms"]) == {"draft", "verify", "accept", "record", "feedback"}
    assert all(ms > 0 for ms in ad["phase_ms"].values()) and "by phase" in text
    mix = ad["kernel_mix"]  # on a CPU: leaf aten ops by kind
    assert mix["all"]["kernels"] > 0 and mix["products"]["ms"] > 0 and "by kind" in text
    assert sum(mix[k]["ms"] for k in mix if k != "all") == pytest.approx(mix["all"]["ms"], 0.01)
    assert gpu_profile.kind("void cutlass::Kernel2<cutlass_80_tensorop_bf16_gemm>") == "products"
    assert gpu_profile.kind("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"
    assert gpu_profile.kind("void at::native::index_elementwise_kernel<128, 4>") == "copies"
    assert gpu_profile.kind("void at::native::vectorized_elementwise_kernel<4>") == "elementwise"
    from adapld_cli.engine import loop

    assert "PROFILE_PHASES" not in vars(loop)  # a parameter of stream: nothing left switched on


def test_gpu_profile_with_graphs():
    from adapld_cli.engine import AdaPLDSettings

    gpu_profile = _script("gpu_profile")
    with one_thread():
        r = gpu_profile.profile_method(
            tiny_model("llama"), random_prompt(2), "adapld", 3, warmup=1,
            settings=AdaPLDSettings(graphs=True),
        )  # fmt: skip
    assert r["method"] == "adapld-graphs" and r["events"] == 3
    modes = {m: AdaPLDSettings(**gpu_profile.MODES[m]) for m in gpu_profile.MODES}
    assert [gpu_profile.mode_of(s, "cuda") for s in modes.values()] == list(modes)
    assert gpu_profile.mode_of(AdaPLDSettings(), "cuda") == "graphs"  # the CUDA default
    assert gpu_profile.mode_of(AdaPLDSettings(), "cpu") == "eager"


def test_gpu_exact_compares_tree_rows_with_single_steps():
    """On the exact kernels every row of a 20-node tree is the single step's, bit for bit,
    eagerly, through static passes and through uniform ones; the rows are told apart by
    whether they lie on the tree's first-child chain."""
    from tests.test_kernels import _packed

    gpu_exact = _script("gpu_exact")
    parents = gpu_exact.dfs_parents(20, 0, chain=8)
    assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)
    assert parents[:9] == list(range(-1, 8))  # the copied chain first
    with one_thread():
        model = _packed("qwen2", torch.bfloat16)
        lines = gpu_exact.run(model, random_prompt(3), trees=2, nodes=20, chain=8)
        assert lines == [
            f"{mode}: 40/40 rows bitwise equal (chain 19/19, branches 21/21), 40/40 same "
            "argmax, max |diff| 0"
            for mode in gpu_exact.MODES
        ]
        equal, same, _ = gpu_exact.compare(
            model, random_prompt(3), [5, 6, 7], [-1, 0, 0], "uniform"
        )
        assert equal == [True] * 3 and same == 3


def test_gpu_check_script_parses():
    import subprocess

    subprocess.run(["bash", "-n", str(GPU / "gpu_check.sh")], check=True)
