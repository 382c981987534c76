"""Tiny causal LMs for engine tests: randomly initialised Llama, Qwen2, Qwen3, Gemma 3 (with
sliding-window layers) and GPT-2 (float64 by default), and successor models whose next token
is scripted (:func:`successor_lm`)."""

from __future__ import annotations

import random

VOCAB = 48
WINDOW = 24  # the tiny Gemma 3's sliding window: shorter than the tests' prompts


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


def tiny_model(
    arch: str,
    seed: int = 0,
    dtype: str = "float64",
    hidden: int = 32,
    intermediate: int = 64,
    vocab: int | None = None,
    positions: int = 1024,
):
    import torch
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab or VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None
    )
    if arch == "gpt2":
        cfg = GPT2Config(n_embd=hidden, n_layer=2, n_head=4, n_positions=positions, **common)
        model = GPT2LMHeadModel(cfg)
    else:
        cls_cfg, cls = {
            "qwen2": (Qwen2Config, Qwen2ForCausalLM),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM),
            "llama": (LlamaConfig, LlamaForCausalLM),
            "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
        }[arch]
        extra = {"head_dim": hidden // 4} if arch in ("qwen3", "gemma3") else {}  # default 128/256
        if arch == "gemma3":  # two sliding-window layers of WINDOW positions, then a full one
            extra |= {
                "sliding_window": WINDOW,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                "query_pre_attn_scalar": hidden // 4,
            }
        cfg = cls_cfg(
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=positions,
            **extra,
            **common,
        )
        model = cls(cfg)
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = None
    return model


def successor_lm(
    vocab: int,
    following: dict[int, int],
    *,
    hidden: int = 256,
    strength: float = 20.0,
    mix: float = 0.0,
    seed: int = 0,
    dtype: str = "float32",
    **config,
):
    """A tiny Qwen2 whose favourite next token after ``a`` is ``following[a]``.

    Embedding rows are random unit vectors and each LM-head row ``b`` adds ``strength`` times
    the embedding of every token ``b`` must follow, so after ``a`` the logit of
    ``following[a]`` is ``strength`` and the others are ``strength`` times a random cosine
    (about ``strength / sqrt(hidden)``). ``mix`` scales the attention and MLP output
    projections: ``0`` zeroes them (the residual stream is the current token's embedding:
    a pure bigram map, deterministic by construction), a small positive value lets the
    context shift the logits a little, as in a real model. ``config`` goes to ``Qwen2Config``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        bos_token_id=None,
        torch_dtype="float32",
        **config,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    embed = torch.randn(vocab, hidden, generator=gen)
    embed = embed / embed.norm(dim=1, keepdim=True)
    head = torch.zeros(vocab, hidden)
    for a, b in following.items():
        head[b] += strength * embed[a]
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(mix)
            layer.mlp.down_proj.weight.mul_(mix)
    return model.to(getattr(torch, dtype))


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
