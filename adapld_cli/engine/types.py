"""Plain data shared by the engine and its consumers (CLI, UI, bench).

No torch import here: the CLI and UI import these types at start-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum


class Source(IntEnum):
    """Where an emitted token came from."""

    MODEL = 0  # the model's own token (the bonus token of a step, or a plain AR step)
    LEXICAL = 1  # accepted draft token copied by n-gram lookup
    SEMANTIC = 2  # accepted draft token from the hidden-state semantic fallback
    BRANCH = 3  # accepted draft token from a top-K branch of the draft tree


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate. Greedy when ``temperature == 0``."""

    max_new_tokens: int = 2048
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    # a code fence: also stop at the line that closes the first block it opens (an answer
    # that explains, then gives a file: what follows the block is never read)
    stop_block: str = ""
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Stats:
    """Running statistics of one generation (paper metrics F and T, plus drafting detail)."""

    method: str = ""
    prompt_tokens: int = 0
    new_tokens: int = 0
    forward_passes: int = 0  # F: decode forward passes (prefill not counted)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    drafted_tokens: int = 0  # draft nodes sent to verification
    accepted_draft_tokens: int = 0  # draft tokens accepted (bonus tokens excluded)
    lexical_steps: int = 0  # steps where the n-gram index found a candidate
    lexical_nohit_steps: int = 0  # steps where it found none
    semantic_steps: int = 0  # steps drafted by the semantic fallback
    semantic_accepted: int = 0  # tokens accepted from semantic drafts
    branch_steps: int = 0  # steps whose tree had branches
    branch_accepted: int = 0  # tokens accepted through a branch
    lexical_accepted: int = 0  # tokens accepted from the copied main chain
    accept_hist: dict[int, int] = field(default_factory=dict)  # tokens per pass -> count
    ar_step_s: float = 0.0  # measured seconds of one single-token decode pass (0 = unknown)
    cached_tokens: int = 0  # prompt positions taken over from a prefix cache (not prefilled)
    pass_s: float = 0.0  # seconds of the decode passes themselves: forward + acceptance walk
    # (LM head included); decode_s - pass_s is the engine's own host work (drafting, masks,
    # cache compaction, bookkeeping)
    graph_passes: int = 0  # decode passes replayed from a CUDA graph (AdaPLDSettings.graphs)
    graph_fallback: str = ""  # why CUDA graph capture failed ("" = it did not)

    @property
    def mean_accepted(self) -> float:
        """T: mean tokens emitted per decode pass (bonus included)."""
        return self.new_tokens / self.forward_passes if self.forward_passes else 0.0

    @property
    def lexical_nohit_rate(self) -> float:
        n = self.lexical_steps + self.lexical_nohit_steps
        return self.lexical_nohit_steps / n if n else 0.0

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def decode_tok_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def est_speedup(self) -> float:
        """Estimated speedup over plain decoding: tokens x single-step cost / decode time."""
        if self.ar_step_s <= 0 or self.decode_s <= 0:
            return 0.0
        return self.new_tokens * self.ar_step_s / self.decode_s

    def as_dict(self) -> dict:
        d = asdict(self)
        d["accept_hist"] = {str(k): v for k, v in sorted(self.accept_hist.items())}
        d.update(
            mean_accepted=round(self.mean_accepted, 4),
            lexical_nohit_rate=round(self.lexical_nohit_rate, 4),
            total_s=round(self.total_s, 4),
            decode_tok_s=round(self.decode_tok_s, 3),
        )
        return d


@dataclass
class StepEvent:
    """One decode step: the tokens it emitted and where each came from."""

    tokens: list[int]
    sources: list[Source]
    stats: Stats  # running totals (the same object every step: copy it to keep a snapshot)
    finished: bool = False
    stop_reason: str | None = None  # "eos" | "stop_string" | "max_new_tokens" when finished


@dataclass
class GenerationResult:
    tokens: list[int]
    stats: Stats
    stop_reason: str | None


class UnsupportedModelError(Exception):
    """The model cannot be driven by the engine (one-line reason)."""
