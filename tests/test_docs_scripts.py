"""The scripts in docs/ that a later session runs on a lent device work here first: the GPU
profile (``docs/gpu_profile.py``) on a tiny model on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.tiny_models import one_thread, random_prompt, tiny_model

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
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


def test_gpu_check_script_parses():
    import subprocess

    subprocess.run(["bash", "-n", str(DOCS / "gpu_check.sh")], check=True)
