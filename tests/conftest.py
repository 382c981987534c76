"""Shared fixtures: tiny offline test models that behave exactly as scripted.

A tiny model here is a real Qwen2ForCausalLM saved with ``save_pretrained`` (so ``--model DIR``
goes through the real model layer), made deterministic: attention and MLP output projections
are zero, so the residual stream is the token embedding and the next token is
``argmax(lm_head(norm(embed[last])))`` — a bigram map. Embedding rows are random unit vectors
in 256 dimensions and each ``lm_head`` row points at the embeddings of the tokens it must
follow, so after the prompt's last token (the opening code fence) the model spells a chosen
chain of distinct tokens: a file, the closing fence, the end-of-turn token.

The tokenizer is byte-level BPE (any text round-trips) plus added tokens for whole lines of
the scripted files, built in-test with the ``tokenizers`` library and wrapped in
``PreTrainedTokenizerFast`` with a Qwen-style chat template.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

# The input file every scripted model "edits" (tests write it into tmp dirs).
SOURCE = "def foo(a, b):\n    return a + b\n\n\ndef main():\n    print(foo(1, 2))\n"
# What the "rename" model answers: foo renamed to bar.
RENAMED = "def bar(a, b):\n    return a + b\n\n\ndef main():\n    print(bar(1, 2))\n"
# What the "broken" model answers: the colon of the first def is missing.
BROKEN = "def bar(a, b)\n    return a + b\n\n\ndef main():\n    print(bar(1, 2))\n"

LINES = {
    "src1": "def foo(a, b):\n",
    "body": "    return a + b\n\n\n",
    "main": "def main():\n",
    "src4": "    print(foo(1, 2))\n",
    "new1": "def bar(a, b):\n",
    "new4": "    print(bar(1, 2))\n",
    "bad1": "def bar(a, b)\n",
    "und4": "    print(baz(1, 2))\n",
}
FENCE_OPEN = ("```python\n", "```\n")
FENCE_CLOSE = "```"
EOS = "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# scripted answers: chain of added-token keys, then the fence, then eos ("loop" never ends)
SCRIPTS = {
    "rename": ["new1", "body", "main", "new4", "CLOSE", "EOS"],
    "broken": ["bad1", "body", "main", "new4", "CLOSE", "EOS"],
    "same": ["src1", "body", "main", "src4", "CLOSE", "EOS"],
    "undefined": ["new1", "body", "main", "und4", "CLOSE", "EOS"],  # calls a baz never defined
    "loop": ["new1", "body", "new1"],  # a cycle: never closes the fence
}


def piece_tokenizer(pieces: list[str]):
    """A byte-level tokenizer with a chat template where each of ``pieces`` is one token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", EOS, "<|endoftext|>"])
    tok.add_tokens([AddedToken(p, normalized=False) for p in pieces])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def build_tokenizer():
    return piece_tokenizer([*LINES.values(), *FENCE_OPEN, FENCE_CLOSE])


def token_id(tokenizer, key: str) -> int:
    text = {"CLOSE": FENCE_CLOSE, "EOS": EOS}.get(key) or LINES[key]
    tid = tokenizer.convert_tokens_to_ids(text)
    if not isinstance(tid, int) or tid < 0:  # added tokens are stored under their content
        tid = tokenizer.get_vocab()[text]
    return tid


def successor_model(
    tokenizer, following: dict[int, int], *, max_positions: int = 32768, seed: int = 0
):
    """A tiny Qwen2 whose greedy next token after token ``a`` is ``following[a]`` (attention
    and MLP outputs zeroed: the LM head reads the current token's embedding)."""
    from tests.tiny_models import successor_lm

    model = successor_lm(
        len(tokenizer),
        following,
        seed=seed,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_model(tokenizer, script: list[str], *, max_positions: int = 32768, seed: int = 0):
    """A model that answers ``script`` (distinct tokens) after any fence opener, and at the
    start of its turn (after the newline that opens it: an answer asked to explain first
    starts there, and this one gives the file alone)."""
    ids = [token_id(tokenizer, k) for k in script]
    nxt: dict[int, int] = {tokenizer.convert_tokens_to_ids("\u010a"): ids[0]}  # byte "\n"
    for opener in FENCE_OPEN:
        nxt[tokenizer.get_vocab()[opener]] = ids[0]
    for a, b in zip(ids, ids[1:], strict=False):
        assert a not in nxt or nxt[a] == b, "script tokens must be distinct"
        nxt[a] = b
    return successor_model(tokenizer, nxt, max_positions=max_positions, seed=seed)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, tiny_tokenizer) -> dict[str, Path]:
    """Model folders by script name: rename, broken, same, undefined, loop (see SCRIPTS)."""
    root = tmp_path_factory.mktemp("tiny-models")
    out: dict[str, Path] = {}
    for name, script in SCRIPTS.items():
        folder = root / name
        model = build_model(tiny_tokenizer, script)
        model.save_pretrained(folder)
        tiny_tokenizer.save_pretrained(folder)
        out[name] = folder
    small = root / "small-context"  # a 64-position model: every real prompt is too long
    build_model(tiny_tokenizer, SCRIPTS["rename"], max_positions=64).save_pretrained(small)
    tiny_tokenizer.save_pretrained(small)
    out["small-context"] = small
    return out


@pytest.fixture(scope="session")
def loaded(tiny_models):
    """``loaded(name)``: the scripted tiny model ``name`` loaded once (float32, CPU)."""
    from adapld_cli.model import load

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load(str(tiny_models[name]), device="cpu", dtype="float32")
        return cache[name]

    return get


@pytest.fixture(scope="session")
def texts() -> SimpleNamespace:
    """The scripted texts: ``source`` (input), ``renamed`` and ``broken`` (model answers)."""
    return SimpleNamespace(source=SOURCE, renamed=RENAMED, broken=BROKEN)


@pytest.fixture
def source_file(tmp_path) -> Path:
    path = tmp_path / "calc.py"
    path.write_bytes(SOURCE.encode())
    return path


# The embedded model most real-model tests run on: ~3x faster per step than the default.
TEST_MODEL = "coder-0.5b"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "default_model: a real-model test that runs on the default embedded model (coder-1.5b) "
        f"instead of {TEST_MODEL}",
    )


@pytest.fixture(autouse=True)
def _clean_env(request, monkeypatch, tmp_path_factory):
    """No colour, CI or pre-commit state leaking in. Tests not marked ``real`` also get an
    empty model cache (``ADAPLD_HOME``), so nothing reaches the user's converted model; real
    tests keep the user's cache (converting an embedded model takes about a minute) and run on
    ``coder-0.5b`` (``ADAPLD_MODEL``, inherited by subprocesses) unless marked
    ``default_model``, which leaves the default (``coder-1.5b``) in charge. Every test gets
    its own undo journal (``ADAPLD_JOURNAL``, inherited by subprocesses): the edits of real
    tests, hooks included, must not push the user's own runs out of theirs."""
    for var in ("PRE_COMMIT", "CI", "NO_COLOR", "ADAPLD_MODEL", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ADAPLD_JOURNAL", str(tmp_path_factory.mktemp("home") / "journal"))
    real = request.node.get_closest_marker("real") is not None
    if not real and "ADAPLD_HOME" not in os.environ:
        monkeypatch.setenv("ADAPLD_HOME", str(tmp_path_factory.getbasetemp() / "adapld-home"))
    if real and request.node.get_closest_marker("default_model") is None:
        monkeypatch.setenv("ADAPLD_MODEL", TEST_MODEL)
    _native_kernels_built()


def _native_kernels_built() -> None:
    """Build adapld's native kernels (adapld_cli/model/qmm.cpp) in this ``ADAPLD_HOME`` here,
    once: a first build (~30-60 s) must not happen inside a subprocess a test times."""
    from adapld_cli.model import quant

    if quant.unavailable() is None:
        quant.extension()  # a no-op once built for this home


@pytest.fixture(scope="session")
def embedded():
    """The embedded ``coder-0.5b`` model, loaded once per session from the user's cache,
    offline."""
    from adapld_cli.model import load

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ADAPLD_MODEL", raising=False)
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield load(TEST_MODEL, device="cpu")
