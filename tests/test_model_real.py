"""The embedded pretrained models, for real (slow: `-m real` runs them, `-m "not real"` skips).

Most run on ``coder-0.5b`` (the ``embedded`` fixture); the ``default_model`` ones run the
README's first command on the default ``coder-1.5b``. They use the user's model cache
(``$ADAPLD_HOME`` or ``~/.cache/adapld``) rather than the test suite's temp home, so the
one-time conversion (under a minute per model) is shared with normal use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapld_cli.model.placement import resolve_placement

pytestmark = pytest.mark.real

CODE = (
    "def greet(name):\n"
    "\treturn f'héllo, {name} ✓'   \n"
    "\n"
    "# 日本語のコメント 🚀\t\n"
    "x = {'a': 1,\t'b': [2, 3]}  \r\n"
    "    \n"
    "\t\t  trailing\t \n"
)


def test_embedded_model_loads_offline(embedded):
    assert (embedded.source, embedded.name) == ("embedded", "coder-0.5b")
    # auto placement: bfloat16 wherever the 4-bit kernels run (either kernel target), else
    # what resolve_placement gives the CPU
    expected = "bfloat16" if embedded.weights == "quantized" else resolve_placement("cpu").dtype
    assert (embedded.device, embedded.dtype) == ("cpu", expected)
    assert not embedded.model.training
    config = embedded.model.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("qwen2", 24, 896)
    assert config.vocab_size == 151_936
    assert getattr(config, "quantization_config", None) is None


def test_tokenizer_round_trips_code_exactly(embedded):
    tok = embedded.tokenizer
    ids = tok.encode(CODE, add_special_tokens=False)
    assert tok.decode(ids) == CODE
    assert tok.decode(tok(CODE)["input_ids"]) == CODE  # no BOS/EOS added by default


def test_chat_template_and_short_greedy_generation(embedded):
    import torch

    tok, model = embedded.tokenizer, embedded.model
    messages = [{"role": "user", "content": "Complete: def add(a, b):"}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user" in prompt and prompt.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False
    )
    new = out[0, ids.shape[1] :]
    # greedy is deterministic: pinned (the same in bfloat16 and float32, on 1 or 2 threads)
    assert new.tolist() == [95456, 0, 21193, 374, 279, 8145]
    assert tok.decode(new) == "Certainly! Below is the completed"
    assert tok.eos_token == "<|im_end|>"


ROOT = Path(__file__).resolve().parents[1]
README_INSTRUCTION = "Rename the method total_value to value and update every call"


@pytest.mark.default_model
def test_readme_first_command_renames_with_the_default_model():
    """``adapld edit adapld_cli/data/inventory.py -i "Rename the method total_value to value and
    update every call" --diff`` in a fresh process (as typed, from the repository root): the
    default model renames both methods and both calls, and nothing is written."""
    import os
    import subprocess
    import sys

    from adapld_cli.model import model_info

    inventory = ROOT / "adapld_cli" / "data" / "inventory.py"
    before = inventory.read_bytes()
    entry = "from adapld_cli.cli.app import main; main()"
    argv = ["edit", "adapld_cli/data/inventory.py", "-i", README_INSTRUCTION, "--diff"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", entry, *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert inventory.read_bytes() == before  # --diff writes nothing
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--- a/adapld_cli/data/inventory.py", "+++ b/adapld_cli/data/inventory.py"]
    removed = [ln[1:] for ln in lines[2:] if ln.startswith("-")]
    added = [ln[1:] for ln in lines[2:] if ln.startswith("+")]
    assert sum("total_value" in ln for ln in removed) == 4  # 2 definitions, 2 calls
    assert not any("total_value" in ln for ln in added)
    assert [ln.strip() for ln in added] == [
        "def value(self) -> float:",
        "def value(self) -> float:",
        "return sum(item.value() for item in self.items.values())",
        'lines = [f"{len(inventory.items)} products, worth {inventory.value():.2f}"]',
    ]
    assert len(added) == len(removed)  # only those lines changed
    info = model_info()
    assert (info["name"], info["state"]) == ("coder-1.5b", "ready")


def test_the_embedded_gguf_from_an_ollama_store_is_the_embedded_model(
    embedded, tmp_path, monkeypatch
):
    """The embedded GGUF laid out as `ollama pull` lays it out (a blob named by its sha256, a
    manifest naming it) loads the same weights and decodes the same greedy tokens as
    ``--model coder-0.5b`` (issue 47: a model users already have is the same model)."""
    import json

    import torch

    from adapld_cli.engine import GenerationConfig, generate
    from adapld_cli.model import load, stores
    from adapld_cli.model.assemble import assemble, locate_embedded_parts
    from adapld_cli.model.paths import EMBEDDED_MODELS

    model = EMBEDDED_MODELS[embedded.name]
    store = tmp_path / "ollama"
    assemble(
        locate_embedded_parts(model),
        store / "blobs" / f"sha256-{model.sha256}",
        size=model.size,
        sha256=model.sha256,
    )
    manifest = store / "manifests" / stores.OLLAMA_HOST / "library" / "qwen2.5-coder" / "0.5b"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": stores.OLLAMA_MODEL_LAYER, "digest": f"sha256:{model.sha256}"}
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    monkeypatch.setenv("ADAPLD_HOME", str(tmp_path / "home"))  # its conversion is this test's
    stored = load("ollama:qwen2.5-coder:0.5b", device="cpu")
    assert (stored.weights, stored.dtype) == (embedded.weights, embedded.dtype)
    for a, b in zip(
        stored.model.state_dict().values(), embedded.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    tok = embedded.tokenizer
    messages = [{"role": "user", "content": f"Rename greet to welcome:\n```python\n{CODE}```"}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    config = GenerationConfig(max_new_tokens=48)
    ours = generate(stored.model, ids, config, "adapld", tokenizer=stored.tokenizer)
    theirs = generate(embedded.model, ids, config, "adapld", tokenizer=tok)
    assert ours.tokens == theirs.tokens and ours.stats.accepted_draft_tokens > 0
