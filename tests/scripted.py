"""Tiny scripted models that answer any chosen text (the conftest models answer one file).

Same construction as ``tests/conftest.py`` (a real Qwen2 whose attention and MLP outputs are
zero, so the next token depends only on the last one): the answer is cut into chunks that are
added to a byte-level tokenizer as whole tokens, and ``lm_head`` chains them after the opening
code fence, then the closing fence and end-of-turn. A chunk is a line, or several lines when
that line was used before (a chain's tokens must be distinct).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import piece_tokenizer, successor_model

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
    """One token per answer piece, per fence opener and for the closing fence."""
    openers = [f"```{tag}\n" for tag in FENCE_TAGS]
    return piece_tokenizer(list(dict.fromkeys([*pieces, *openers, CLOSE])))


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
