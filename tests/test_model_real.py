"""The embedded pretrained model, for real (slow: `-m real` runs them, `-m "not real"` skips).

Uses the user's model cache (``$ADAPLD_HOME`` or ``~/.cache/adapld``) rather than the test
suite's temp home, so the one-time conversion (~1.5 min) is shared with normal use.
"""

from __future__ import annotations

import pytest

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
    assert embedded.source == "embedded"
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
