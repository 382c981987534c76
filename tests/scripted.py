"""Tiny scripted models that answer any chosen text (the conftest models answer one file).

Same construction as ``tests/conftest.py`` (a real Qwen2 whose attention and MLP outputs are
zero, so the next token depends only on the last one): the answer is cut into chunks that are
added to a byte-level tokenizer as whole tokens, and ``lm_head`` chains them after the opening
code fence, then the closing fence and end-of-turn. A chunk is a line, or several lines when
that line was used before (a chain's tokens must be distinct).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CHAT_TEMPLATE, EOS, successor_model

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
    chain = [_id(tokenizer, c) for c in chunks(answer)] + [_id(tokenizer, CLOSE)]
    chain.append(tokenizer.eos_token_id)
    following = {_id(tokenizer, f"```{tag}\n"): chain[0] for tag in FENCE_TAGS}
    following.update(zip(chain, chain[1:], strict=False))
    return successor_model(tokenizer, following, seed=seed)


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
