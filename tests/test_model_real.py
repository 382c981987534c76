"""The embedded pretrained models, for real (slow: `-m real` runs them, `-m "not real"` skips).

Most run on ``coder-0.5b`` (the ``embedded`` fixture); the ``default_model`` ones run the
README's first command on the default ``coder-1.5b``. They use the user's model cache
(``$ADAPLD_HOME`` or ``~/.cache/adapld``) rather than the test suite's temp home, so the
one-time conversion (under a minute per model) is shared with normal use.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app

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
    assert (embedded.device, embedded.dtype) == ("cpu", "float32")
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
    assert 0 < len(new) <= 6
    assert tok.decode(new, skip_special_tokens=True).strip()
    assert tok.eos_token == "<|im_end|>"


INVENTORY = Path(__file__).resolve().parents[1] / "adapld_cli" / "data" / "inventory.py"
README_INSTRUCTION = "Rename the method total_value to value and update every call"


@pytest.mark.default_model
def test_readme_first_command_renames_with_the_default_model(monkeypatch):
    """``adapld edit adapld_cli/data/inventory.py -i "Rename the method total_value to value and
    update every call" --diff``: the default model renames both methods and both calls."""
    from adapld_cli.model import model_info

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = INVENTORY.read_bytes()
    result = CliRunner().invoke(
        app, ["edit", str(INVENTORY), "-i", README_INSTRUCTION, "--diff", "--no-live"]
    )
    assert result.exit_code == 0, result.stderr
    assert INVENTORY.read_bytes() == before  # --diff writes nothing
    removed = [ln[1:] for ln in result.stdout.splitlines() if ln.startswith("-") and ln[1:2] != "-"]
    added = [ln[1:] for ln in result.stdout.splitlines() if ln.startswith("+") and ln[1:2] != "+"]
    assert sum("total_value" in ln for ln in removed) == 4  # 2 definitions, 2 calls
    assert not any("total_value" in ln for ln in added)
    assert [ln.strip() for ln in added if "value(" in ln] == [
        "def value(self) -> float:",
        "def value(self) -> float:",
        "return sum(item.value() for item in self.items.values())",
        'lines = [f"{len(inventory.items)} products, worth {inventory.value():.2f}"]',
    ]
    assert len(added) == len(removed)  # only those lines changed
    info = model_info()
    assert (info["name"], info["state"]) == ("coder-1.5b", "ready")
