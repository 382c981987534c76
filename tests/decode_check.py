"""ar vs adapld on real edits of the bundled sample, in one process (not a test).

For each edit: plain greedy decoding (``ar``) and AdaPLD on the same loaded model; prints
whether the outputs are identical token for token, tokens, forward passes, T, decode seconds
and the decode speedup. Alternates the methods over ``--rounds`` rounds and reports medians.

    python -m tests.decode_check [--dtype auto] [--rounds 1] [--max-new 700] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
from importlib.resources import files

EDITS = (
    "Rename the method total_value to value and update every call",
    "Rename the class Item to StockItem everywhere",
)


def main() -> None:
    from adapld_cli.edit.prompt import build_prompt, load_template
    from adapld_cli.engine import GenerationConfig, generate
    from adapld_cli.model import load
    from adapld_cli.model.placement import set_threads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=700)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    set_threads(args.threads)
    lm = load(device="cpu", dtype=args.dtype, progress=False)
    print(f"model {lm.name} dtype={lm.dtype} kernels={lm.model.adapld_kernels}")
    code = files("adapld_cli.data").joinpath("inventory.py").read_text()
    config = GenerationConfig(max_new_tokens=args.max_new)
    for instruction in EDITS:
        prompt = build_prompt(
            load_template(), lm.tokenizer, code=code, instruction=instruction,
            filename="inventory.py", lang="python",
        )  # fmt: skip
        runs: dict[str, list] = {"ar": [], "adapld": []}
        for _ in range(args.rounds):
            for method in runs:
                runs[method].append(generate(lm.model, prompt.ids, config, method))
        ar, ad = runs["ar"][-1], runs["adapld"][-1]
        t_ar = statistics.median(r.stats.decode_s for r in runs["ar"])
        t_ad = statistics.median(r.stats.decode_s for r in runs["adapld"])
        print(
            f"{instruction[:40]!r}: prompt {len(prompt.ids)} identical={ar.tokens == ad.tokens} "
            f"tokens {len(ad.tokens)} passes ar {ar.stats.forward_passes} adapld "
            f"{ad.stats.forward_passes} T={ad.stats.mean_accepted:.1f} decode s ar {t_ar:.1f} "
            f"adapld {t_ad:.1f} speedup {t_ar / t_ad:.2f}x prefill s {ad.stats.prefill_s:.1f} "
            f"branch steps {ad.stats.branch_steps} semantic steps {ad.stats.semantic_steps}"
        )


if __name__ == "__main__":
    main()
