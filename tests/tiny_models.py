"""Tiny randomly initialised causal LMs (float64) for engine tests: Llama, Qwen2, GPT-2."""

from __future__ import annotations

import random

VOCAB = 48


def one_thread():
    """Context for tiny-model tests: torch's thread pool only slows down 32-wide layers."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def ctx():
        old = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(old)

    return ctx()


def tiny_model(arch: str, seed: int = 0, dtype: str = "float64"):
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "gpt2":
        cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=1024, **common)
        model = GPT2LMHeadModel(cfg)
    else:
        cls_cfg, cls = (
            (Qwen2Config, Qwen2ForCausalLM) if arch == "qwen2" else (LlamaConfig, LlamaForCausalLM)
        )
        cfg = cls_cfg(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            **common,
        )
        model = cls(cfg)
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = None
    return model


def random_prompt(seed: int, repeats: bool = True) -> list[int]:
    """A prompt of 30-90 tokens; with ``repeats`` it contains copied spans (drafts hit)."""
    rng = random.Random(seed)
    if not repeats:
        return [rng.randrange(VOCAB) for _ in range(rng.randrange(30, 90))]
    base = [rng.randrange(VOCAB) for _ in range(rng.randrange(15, 35))]
    out = list(base)
    for _ in range(rng.randrange(1, 4)):
        a = rng.randrange(len(base))
        b = min(len(base), a + rng.randrange(3, 20))
        out += [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 5))] + base[a:b]
    return out + base
