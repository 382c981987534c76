"""Model specs, placement, cache state, local-folder loading and the `adapld model` commands.

Fast: no pretrained weights. Loading uses the tiny Qwen2 models from conftest (real
``from_pretrained`` through the real model layer); nothing touches the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.model import (
    ModelError,
    cache_dir,
    clean,
    embedded_models,
    kernels,
    load,
    model_info,
    prepare,
    resolve_spec,
)
from adapld_cli.model.clean import remove_obsolete
from adapld_cli.model.convert import FORMAT, MANIFEST, cache_state
from adapld_cli.model.kernels import resolve_mode
from adapld_cli.model.loader import classify, embedded_source_id
from adapld_cli.model.paths import EMBEDDED_MODELS
from adapld_cli.model.placement import cpu_bf16, resolve_placement


def test_resolve_spec_option_then_env_then_default_model(monkeypatch):
    monkeypatch.delenv("ADAPLD_MODEL", raising=False)
    assert resolve_spec(None) == "coder-1.5b"
    monkeypatch.setenv("ADAPLD_MODEL", "org/from-env")
    assert resolve_spec(None) == "org/from-env"
    assert resolve_spec("org/from-option") == "org/from-option"


def test_cache_dir_honours_adapld_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home"
    monkeypatch.delenv("ADAPLD_HOME")
    assert cache_dir().name == "adapld"


def test_classify_kinds(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "x.gguf").write_bytes(b"GGUF")
    assert classify("embedded").kind == "embedded"
    assert classify("embedded").embedded is EMBEDDED_MODELS["coder-1.5b"]
    assert classify(None).embedded is EMBEDDED_MODELS["coder-1.5b"]
    assert classify("coder-0.5b").embedded is EMBEDDED_MODELS["coder-0.5b"]
    assert classify("Coder-0.5B").name == "coder-0.5b"
    with pytest.raises(ModelError, match=r"no such embedded model .*coder-1\.5b, coder-0\.5b"):
        classify("coder-7b")
    assert classify(str(gguf)).kind == "gguf"
    assert classify(str(folder)).kind == "local"
    assert classify(str(lone)).kind == "gguf" and classify(str(lone)).path == lone / "x.gguf"
    assert classify("Qwen/Qwen2.5-Coder-0.5B-Instruct").kind == "hub"
    for bad in (str(tmp_path / "nope.gguf"), "./missing", str(tmp_path / "a" / "b")):
        with pytest.raises(ModelError, match="no such file or folder"):
            classify(bad)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelError, match=r"\.gguf"):
        classify(str(tmp_path / "notes.txt"))


def test_placement_defaults_and_errors():
    import torch

    auto = resolve_placement()
    if torch.cuda.is_available():
        assert (auto.device_map, auto.device) == ("auto", "cuda")
        assert auto.dtype in ("bfloat16", "float16")
    else:
        # bfloat16 where the CPU has native bf16 and the exact kernels are on, else float32
        fastest = "bfloat16" if cpu_bf16() and resolve_mode() == "exact" else "float32"
        assert (auto.device_map, auto.device, auto.dtype) == ({"": "cpu"}, "cpu", fastest)
        with pytest.raises(ModelError, match="CUDA is not available"):
            resolve_placement("cuda")
    cpu = resolve_placement("CPU", "bfloat16")
    assert (cpu.device, cpu.dtype) == ("cpu", "bfloat16")
    with pytest.raises(ModelError, match="unknown --device"):
        resolve_placement("tpu")
    with pytest.raises(ModelError, match="unknown --dtype"):
        resolve_placement("cpu", "int8")


def test_cuda_decoding_leaves_cudnn_attention_out():
    """On CUDA, torch's cuDNN attention (a graph built per new shape: ~2 ms of host time a
    call on an H200) is switched off before decoding; elsewhere nothing is touched."""
    import torch

    from adapld_cli.model.placement import tune_attention

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert tune_attention("cpu") is False and torch.backends.cuda.cudnn_sdp_enabled()
        assert tune_attention("cuda") is True and not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_cache_state_needs_a_complete_matching_manifest(tmp_path):
    from importlib.metadata import version

    folder = tmp_path / "cache"
    assert cache_state(folder, "src") == "missing"
    folder.mkdir()
    assert cache_state(folder, "src") == "stale"  # a folder without manifest: partial
    (folder / "model.safetensors").write_bytes(b"x")
    manifest = {
        "format": FORMAT,
        "source": "src",
        "transformers": version("transformers"),
        "files": ["model.safetensors"],
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert cache_state(folder, "src") == "ready"
    assert cache_state(folder, "other-source") == "stale"
    (folder / MANIFEST).write_text(json.dumps({**manifest, "transformers": "4.57.0"}))
    assert cache_state(folder, "src") == "stale"
    (folder / MANIFEST).write_text(json.dumps({**manifest, "format": 1}))  # the float32 layout
    assert cache_state(folder, "src") == "stale"
    (folder / MANIFEST).write_text(json.dumps(manifest))
    (folder / "model.safetensors").unlink()
    assert cache_state(folder, "src") == "stale"


def test_load_local_folder(tiny_models):
    folder = tiny_models["rename"]
    loaded = load(str(folder), device="cpu")
    assert (loaded.source, loaded.device) == ("local", "cpu")
    assert loaded.dtype == resolve_placement("cpu").dtype
    assert loaded.path == str(folder.resolve()) and loaded.name == folder.name
    assert not loaded.model.training
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("x = 1\n")) == "x = 1\n"
    assert prepare(str(folder)) == folder.resolve()


# what kernels.supported() may answer for a CPU model in float32/bfloat16 on a given machine,
# each with an independent check that the limitation is real
def _genuine_limitations(dtype: str) -> dict[str, bool]:
    import torch

    ops = torch.ops.mkldnn
    return {
        "torch built without oneDNN": not torch.backends.mkldnn.is_available(),
        "oneDNN linear ops missing": not (
            hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")
        ),
        "this CPU has no oneDNN bfloat16 support": dtype == "bfloat16"
        and not ops._is_mkldnn_bf16_supported(),
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_load_installs_the_exact_kernels_wherever_supported(monkeypatch, tiny_models, dtype):
    """load() of a local folder installs the prepacked, batch-invariant kernels on every CPU
    that can run them: without them the bit-exact tests would have nothing to check."""
    import torch
    from transformers import AutoModelForCausalLM

    monkeypatch.delenv(kernels.ENV_KERNELS, raising=False)  # the default mode: exact
    folder = tiny_models["rename"]
    stock = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=getattr(torch, dtype)
    ).eval()
    reason = kernels.supported(stock)
    loaded = load(str(folder), device="cpu", dtype=dtype)
    model = loaded.model
    assert loaded.dtype == dtype
    if reason is not None:  # only a real limitation of this torch or CPU may turn them off
        assert _genuine_limitations(dtype).get(reason), f"kernels.supported() said: {reason}"
        assert getattr(model, "adapld_kernels", None) == "stock"  # apply() ran and said no
        pytest.skip(f"the exact kernels cannot run here: {reason}")
    assert getattr(model, "adapld_kernels", None) == "exact", "load() left the stock kernels"
    linears = [n for n, m in stock.named_modules() if isinstance(m, torch.nn.Linear)]
    packed = kernels.packed_linear_class()
    assert len(linears) > 2 and "lm_head" in linears
    assert [n for n, m in model.named_modules() if isinstance(m, packed)] == linears
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert model.config._attn_implementation == kernels.ATTENTION
    # and the rewired model still computes what the stock one does
    ids = torch.tensor([loaded.tokenizer.encode("```python\n")])
    with torch.inference_mode():
        want, got = stock(ids).logits[0, -1], model(ids).logits[0, -1]
    assert int(got.argmax()) == int(want.argmax())
    torch.testing.assert_close(got.float(), want.float(), rtol=0.02, atol=0.02)


def test_hub_id_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(ModelError) as err:
        prepare("adapld-test/no-such-model")
    message = str(err.value)
    assert "cannot download model adapld-test/no-such-model (offline?)" in message
    assert "--model / ADAPLD_MODEL" in message
    with pytest.raises(ModelError, match=r"cannot download model .* \(offline\?\)"):
        load("adapld-test/no-such-model", device="cpu")
    info = model_info("adapld-test/no-such-model", device="cpu")
    assert (info["source"], info["state"], info["ready"]) == ("hub", "not downloaded", False)


@pytest.mark.parametrize(("spec", "parts"), [(None, 22), ("coder-1.5b", 22), ("coder-0.5b", 6)])
def test_info_of_unprepared_embedded_models(monkeypatch, tmp_path, spec, parts):
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))
    info = model_info(spec, device="cpu")
    assert info["source"] == "embedded" and info["state"] == "needs prepare"
    assert info["name"] == (spec or "coder-1.5b") and info["default"] == (parts == 22)
    assert info["upstream"].startswith("Qwen/Qwen2.5-Coder-")
    assert info["cache"]["path"].startswith(str(tmp_path / "home" / "models" / info["name"]))
    assert len(info["parts"]) == parts and all(p["path"] for p in info["parts"])
    assert info["device"] == "cpu"


def test_embedded_models_lists_both_with_state(monkeypatch, tmp_path):
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))
    rows = embedded_models()
    assert [(r["name"], r["default"], r["state"]) for r in rows] == [
        ("coder-1.5b", True, "needs prepare"),
        ("coder-0.5b", False, "needs prepare"),
    ]
    _fake_cache(tmp_path / "home" / "models" / EMBEDDED_MODELS["coder-0.5b"].key,
                embedded_source_id(EMBEDDED_MODELS["coder-0.5b"]))  # fmt: skip
    assert [r["state"] for r in embedded_models()] == ["needs prepare", "ready"]


def _fake_cache(folder: Path, source: str, fmt: int = FORMAT) -> Path:
    """A converted-cache folder with a manifest (and a dummy weights file)."""
    from importlib.metadata import version

    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"x" * 1000)
    manifest = {
        "format": fmt,
        "source": source,
        "transformers": version("transformers"),
        "files": ["model.safetensors"],
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_clean_removes_only_what_nothing_will_load(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("ADAPLD_HOME", str(home))
    models = home / "models"
    small = EMBEDDED_MODELS["coder-0.5b"]
    keep_embedded = _fake_cache(models / small.key, embedded_source_id(small))
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    st = gguf.stat()
    keep_gguf = _fake_cache(models / "gguf-mine-1", f"gguf:{gguf}:{st.st_size}:{st.st_mtime_ns}")
    old_layout = _fake_cache(models / "embedded-qwen2.5-coder-0.5b-instruct-q4_k_m",
                             embedded_source_id(small), fmt=1)  # fmt: skip
    gone_model = _fake_cache(models / "coder-9b-old", "embedded:" + "0" * 64)
    gone_gguf = _fake_cache(models / "gguf-gone-2", f"gguf:{tmp_path / 'gone.gguf'}:4:1")
    stale_format = _fake_cache(models / "gguf-mine-old", f"gguf:{gguf}:4:1", fmt=1)
    partial = models / "gguf-partial-3"
    partial.mkdir()
    orphan_lock = models / "gguf-long-gone.lock"
    orphan_lock.write_text("")
    (models / (keep_gguf.name + ".lock")).write_text("")
    leftover = home / "embedded" / small.gguf
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half an assembly")
    obsolete = {old_layout, gone_model, gone_gguf, stale_format, partial, orphan_lock, leftover}

    # While preparing an embedded model only caches of embedded models go.
    current = {m.key: embedded_source_id(m) for m in EMBEDDED_MODELS.values()}
    would = remove_obsolete(models, current, only_embedded=True, dry_run=True)
    assert {p for p, _ in would} == {old_layout, gone_model}

    runner = CliRunner()
    dry = runner.invoke(app, ["model", "clean", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert all(p.exists() for p in obsolete)
    assert {line.split(" ", 3)[2] for line in dry.stdout.splitlines()} == {str(p) for p in obsolete}
    result = runner.invoke(app, ["model", "clean"])
    assert result.exit_code == 0 and "removed 7 entries" in result.stderr
    assert not any(p.exists() for p in obsolete)
    assert keep_embedded.is_dir() and keep_gguf.is_dir() and gguf.is_file()
    assert clean() == []


def test_cli_model_info_json_on_stdout(monkeypatch, tmp_path, tiny_models):
    runner = CliRunner()
    result = runner.invoke(app, ["model", "info", "--json", "--model", str(tiny_models["same"])])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["source"], data["ready"], data["device"]) == ("local", True, "cpu")
    assert [m["name"] for m in data["embedded_models"]] == ["coder-1.5b", "coder-0.5b"]
    human = runner.invoke(app, ["model", "info", "--device", "cpu"])
    assert human.exit_code == 0 and "embedded" in human.stdout and "device" in human.stdout
    lines = human.stdout.splitlines()
    assert lines[0].split()[:2] == ["model", "coder-1.5b"]
    assert any(ln.split()[:2] == ["coder-1.5b", "needs"] and "(default)" in ln for ln in lines)
    assert any(ln.split()[:2] == ["coder-0.5b", "needs"] for ln in lines)


def test_cli_model_errors_exit_2_on_stderr(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["model", "info", "--device", "tpu"])
    assert result.exit_code == 2
    assert result.stdout == "" and result.stderr.startswith("adapld: unknown --device")
    missing = str(Path(tmp_path) / "missing.gguf")
    result = runner.invoke(app, ["model", "prepare", "--model", missing])
    assert result.exit_code == 2 and "no such file or folder" in result.stderr


def test_cli_prepare_prints_the_folder(tiny_models):
    folder = tiny_models["same"]
    result = CliRunner().invoke(app, ["model", "prepare", "--model", str(folder)])
    assert result.exit_code == 0 and result.stdout.strip() == str(folder.resolve())
