"""The engine on the embedded pretrained model: AdaPLD output equals transformers' own
greedy ``generate`` on a real edit prompt, in far fewer forward passes (slow: marked real)."""

from __future__ import annotations

import pytest

from adapld_cli.engine import AdaPLDSettings, GenerationConfig, generate

pytestmark = pytest.mark.real

CODE = '''import math


def area(radius: float) -> float:
    """Area of a circle."""
    return math.pi * radius ** 2


def describe(radius: float) -> str:
    return f"circle of radius {radius} has area {area(radius):.2f}"
'''


def test_adapld_matches_transformers_generate(embedded):
    import torch

    from adapld_cli.edit.prompt import build_prompt, load_template

    model, tok = embedded.model, embedded.tokenizer
    prompt = build_prompt(
        load_template(),
        tok,
        code=CODE,
        instruction="rename area to circle_area",
        filename="geometry.py",
        lang="python",
    )
    n = 110
    with torch.inference_mode():
        ref = model.generate(
            torch.tensor([prompt.ids]),
            attention_mask=torch.ones(1, len(prompt.ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=n,
        )
    ref = ref[0, len(prompt.ids) :].tolist()
    config = GenerationConfig(max_new_tokens=n)
    out = generate(model, prompt.ids, config, "adapld")
    assert out.tokens == ref
    assert "circle_area" in tok.decode(out.tokens)
    # the adaptive budget follows measured timings; with it off, drafting is deterministic
    fixed = generate(model, prompt.ids, config, "adapld", settings=AdaPLDSettings(adaptive=False))
    assert fixed.tokens == ref
    assert fixed.stats.forward_passes * 3 < fixed.stats.new_tokens  # T > 3
