"""Models in other tools' stores (:mod:`adapld_cli.model.stores`): an Ollama store, an LM
Studio folder and a Hugging Face cache, laid out as those tools lay them out (built here,
around a tiny GGUF written by the tests), found offline, listed by ``adapld model list``,
and loaded to the same weights as the file itself."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.model import ModelError, stores
from adapld_cli.model.loader import classify
from tests.test_model_gguf import write_tiny_gguf


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """One tiny GGUF, stored three ways; HOME and the stores' variables point here."""
    home = tmp_path / "home"
    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    ollama = home / ".ollama" / "models"
    (ollama / "blobs").mkdir(parents=True)
    shutil.copy(gguf, ollama / "blobs" / f"sha256-{digest}")
    manifest = ollama / "manifests" / stores.OLLAMA_HOST / "library" / "tiny-coder" / "1b"
    manifest.parent.mkdir(parents=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"},
        {"mediaType": stores.OLLAMA_MODEL_LAYER, "digest": f"sha256:{digest}"},
    ]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    lms = home / ".lmstudio" / "models" / "acme" / "tiny-GGUF"
    lms.mkdir(parents=True)
    shutil.copy(gguf, lms / "tiny-Q4_K_M.gguf")
    hub = tmp_path / "hub"
    snap = hub / "models--acme--tiny-GGUF" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    shutil.copy(gguf, snap / "tiny-q4_k_m.gguf")
    shutil.copy(gguf, snap / "mmproj-tiny-f16.gguf")  # a vision projector: never the model
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return {"gguf": gguf, "ollama": ollama, "lmstudio": lms, "hub": snap}


def test_references_find_the_files(layout):
    blob = stores.find("ollama:tiny-coder:1b")
    assert blob is not None and blob.parent == layout["ollama"] / "blobs"
    assert stores.find("lmstudio:acme/tiny-GGUF") == layout["lmstudio"] / "tiny-Q4_K_M.gguf"
    assert stores.find("acme/tiny-GGUF:Q4_K_M") == layout["hub"] / "tiny-q4_k_m.gguf"
    for spec in ("coder-1.5b", "Qwen/Qwen2.5-Coder-1.5B-Instruct", "./x.gguf", "/tmp/a:b/c"):
        assert stores.find(spec) is None, spec
    target = classify("ollama:tiny-coder:1b")
    assert target.kind == "gguf" and target.path == blob.resolve()


def test_ollama_store_from_its_environment_variable(layout, tmp_path, monkeypatch):
    moved = tmp_path / "elsewhere"
    shutil.move(layout["ollama"], moved)
    monkeypatch.setenv("OLLAMA_MODELS", str(moved))
    assert stores.find("ollama:tiny-coder:1b").parent == moved / "blobs"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ollama:tiny-coder", "not in the Ollama store (did you mean tiny-coder:1b?)"),
        ("ollama:tiny-codr:1b", "did you mean tiny-coder:1b?"),
        ("lmstudio:acme/nothing", "not in LM Studio's models"),
        ("acme/tiny-GGUF:Q8_0", "no GGUF matching Q8_0 in the Hugging Face cache"),
    ],
)
def test_a_reference_not_found_is_one_line_with_near_matches(layout, spec, message):
    with pytest.raises(ModelError, match="^--model ") as err:
        stores.find(spec)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_model_list_shows_every_store(layout):
    r = CliRunner().invoke(app, ["model", "list", "--json"])
    assert r.exit_code == 0, r.stderr
    rows = {row["model"]: row for row in json.loads(r.stdout)}
    for spec, store in (
        ("ollama:tiny-coder:1b", "ollama"),
        ("lmstudio:acme/tiny-GGUF/tiny-Q4_K_M.gguf", "lmstudio"),
        ("acme/tiny-GGUF:q4_k_m", "huggingface"),
    ):
        row = rows[spec]
        assert row["store"] == store and row["architecture"] == "qwen2"
        assert row["size_bytes"] == layout["gguf"].stat().st_size
        assert row["kernels"].startswith("no tensors of a type the kernels take (Q4_K, Q6_K, Q8_0")
        assert stores.find(spec) is not None  # the listed string loads
    assert rows["coder-1.5b"]["store"] == "embedded"
    assert not any("mmproj" in name for name in rows)
    human = CliRunner().invoke(app, ["model", "list"])
    assert human.exit_code == 0 and "ollama:tiny-coder:1b" in human.stdout


def test_a_stored_model_loads_as_its_file_does(layout):
    """The same weights and the same greedy tokens from the store and from the file."""
    import torch

    from adapld_cli.engine import generate
    from adapld_cli.engine.types import GenerationConfig
    from adapld_cli.model import load

    outputs = []
    for spec in (str(layout["gguf"]), "ollama:tiny-coder:1b", "acme/tiny-GGUF:Q4_K_M"):
        loaded = load(spec, device="cpu", dtype="float32")
        ids = loaded.tokenizer("def f(x):\n    return x", add_special_tokens=False)["input_ids"]
        config = GenerationConfig(max_new_tokens=12)
        outputs.append(
            (
                generate(loaded.model, ids, config, "adapld", tokenizer=loaded.tokenizer).tokens,
                [p.detach().clone() for p in loaded.model.parameters()],
            )
        )
    base_tokens, base_params = outputs[0]
    for tokens, params in outputs[1:]:
        assert tokens == base_tokens
        assert all(torch.equal(a, b) for a, b in zip(base_params, params, strict=True))
