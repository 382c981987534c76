"""Tiny scripted models that answer any chosen text (the conftest models answer one file).

Same construction as ``tests/conftest.py`` (a real Qwen2 whose attention and MLP outputs are
zero, so the next token depends only on the last one): the answer is cut into chunks that are
added to a byte-level tokenizer as whole tokens, and ``lm_head`` chains them after the opening
code fence, then the closing fence and end-of-turn. A chunk is a line, or several lines when
that line was used before (a chain's tokens must be distinct).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CHAT_TEMPLATE, EOS

FENCE_TAGS = ("", "python", "json", "toml", "yaml")
CLOSE = "```"


def chunks(text: str) -> list[str]:
    """``text`` cut at line ends into pieces that are all different."""
    out: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        current += line
        if current not in out:
            out.append(current)
            current = ""
    if current:  # a repeated tail: glue it to the last piece
        out[-1] += current
    return out


def build_tokenizer(pieces: list[str]):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", EOS, "<|endoftext|>"])
    openers = [f"```{tag}\n" for tag in FENCE_TAGS]
    unique = list(dict.fromkeys([*pieces, *openers, CLOSE]))
    tok.add_tokens([AddedToken(p, normalized=False) for p in unique])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def _id(tokenizer, text: str) -> int:
    return tokenizer.get_vocab()[text]


def build_model(tokenizer, answer: str, *, seed: int = 0):
    """A model that answers ``answer`` (then the closing fence and eos) after any opener."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab, hidden = len(tokenizer), 256
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    embed = torch.randn(vocab, hidden, generator=gen)
    embed = embed / embed.norm(dim=1, keepdim=True)
    head = torch.zeros(vocab, hidden)
    chain = [_id(tokenizer, c) for c in chunks(answer)] + [_id(tokenizer, CLOSE)]
    chain.append(tokenizer.eos_token_id)
    following = {_id(tokenizer, f"```{tag}\n"): chain[0] for tag in FENCE_TAGS}
    following.update(zip(chain, chain[1:], strict=False))
    for a, b in following.items():
        head[b] += 20.0 * embed[a]
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_models(root: Path, answers: dict[str, str], extra: tuple[str, ...] = ()) -> dict:
    """Model folders under ``root``, one per answer, sharing one tokenizer. ``extra`` texts
    (inputs the tests edit) add their lines as tokens too, so prompts stay short."""
    pieces = [p for text in (*answers.values(), *extra) for p in chunks(text)]
    tokenizer = build_tokenizer(pieces)
    out = {}
    for name, answer in answers.items():
        folder = root / name
        build_model(tokenizer, answer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        out[name] = folder
    return out
