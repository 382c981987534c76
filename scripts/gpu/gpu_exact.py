"""Are a draft tree's rows plain decoding's, bit for bit, on this device? (The GPU issue's item
4; not part of the package.) For the real model on a lent GPU, where nothing else says which
kernels a padded or an n-row pass gets::

    python scripts/gpu/gpu_exact.py --device cuda [--model M] [--trees 4] [--nodes 65]

For each of ``--trees`` random draft trees (depth-first, as the drafter builds them: a copied
chain with branches hung under it) after a prompt of an edit case, one verify pass over the
whole tree is compared with plain decoding of every node's root path, one token a pass (the
cache rolled back to each branch point), in five modes: eagerly, with static passes (CUDA
graphs on a GPU), with uniform static passes (every pass, the single steps too, at one
shape: ``AdaPLDSettings.uniform``), with uniform passes whose rows attend their own key
planes (``AdaPLDSettings.planes``), and the same attending the keys in spans of 16 rows
(``AdaPLDSettings.span``: every few single steps then read more keys than the tree pass did,
so a row equal here shows that the keys past a pass's span, masked, change nothing).
Printed per mode: rows whose logits are bitwise equal (split into the tree's first-child
chain, where a node's keys lie where plain decoding puts them, and branch nodes, which lie
further on), rows whose argmax agrees, and the largest difference. Greedy AdaPLD is exactly
plain decoding iff every argmax agrees (and where logits are bitwise equal it cannot differ).
The same script runs on a CPU (``tests/test_scripts.py`` runs it on a tiny model).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any


def dfs_parents(n: int, seed: int, chain: int = 40) -> list[int]:
    """Parents of an ``n``-node tree in depth-first order: a ``chain``-node copied chain from
    the root, the other nodes under random earlier nodes, renumbered so each subtree is
    contiguous (the drafter's order)."""
    rng = random.Random(seed)
    parents = [-1] + [i - 1 if i <= chain else rng.randrange(i) for i in range(1, n)]
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents[1:], 1):
        children[p].append(i)
    order, todo = [], [0]
    while todo:
        node = todo.pop()
        order.append(node)
        todo.extend(reversed(children[node]))
    new = {old: i for i, old in enumerate(order)}
    return [-1 if parents[old] < 0 else new[parents[old]] for old in order]


MODES = ("eager", "static (graphs)", "uniform", "uniform planes", "uniform planes span 16")


def compare(
    model: Any, prefix: list[int], tokens: list[int], parents: list[int], mode: str
) -> tuple[list[bool], int, float]:
    """One tree pass over ``tokens`` after ``prefix`` vs each node from plain single steps,
    both run in ``mode`` (:data:`MODES`): ``(per row: bitwise equal, rows with the same
    argmax, max |logit difference|)``."""
    import torch

    from adapld_cli.engine.graphs import BUCKETS, uniform_shape
    from adapld_cli.engine.runner import ModelRunner

    uniform = mode.startswith("uniform")
    shapes = (uniform_shape(len(tokens) - 1),) if uniform else BUCKETS
    runner = ModelRunner(
        model,
        hidden_layer=None,
        want_hidden=False,
        capacity=len(prefix) + 256,
        static=mode != "eager",
        shapes=shapes,
        planes=mode.startswith("uniform planes"),
        span=16 if mode.endswith("span 16") else 0,
    )
    try:
        runner.prefill(prefix, 0)
        past = runner.cache_len
        depths: list[int] = []
        for p in parents:
            depths.append(0 if p < 0 else depths[p] + 1)
        with torch.inference_mode():
            batch = runner.verify(tokens, parents, depths).logits.rows(list(range(len(tokens))))
            batch = batch.float().cpu()
        runner.keep(past, [])
        fed: list[int] = []
        equal: list[bool] = []
        same = 0
        worst = 0.0
        for i, tok in enumerate(tokens):
            while fed and fed[-1] != parents[i]:
                fed.pop()
            runner.keep(past, list(range(len(fed))))
            row = runner.verify([tok], None, None).logits.row(0).float().cpu()
            fed.append(i)
            equal.append(torch.equal(row, batch[i]))
            same += int(row.argmax() == batch[i].argmax())
            worst = max(worst, (row - batch[i]).abs().max().item())
        return equal, same, worst
    finally:
        runner.close()


def run(model: Any, prefix: list[int], trees: int, nodes: int, chain: int = 40) -> list[str]:
    """The report lines for ``trees`` random trees of ``nodes`` nodes (a ``chain``-node
    copied chain first, :func:`dfs_parents`), one per mode."""
    vocab = min(model.config.vocab_size, 20000)
    lines = []
    for mode in MODES:
        on = [0, 0]  # [bitwise equal, rows] on the first-child chain
        off = [0, 0]  # ... off it
        same = total = 0
        worst = 0.0
        for seed in range(trees):
            rng = random.Random(seed)
            tokens = [rng.randrange(vocab) for _ in range(nodes)]
            parents = dfs_parents(nodes, seed, chain)
            equal, s, w = compare(model, prefix, tokens, parents, mode)
            for i, eq in enumerate(equal):
                tally = on if all(parents[j] == j - 1 for j in range(1, i + 1)) else off
                tally[0] += int(eq)
                tally[1] += 1
            same, total, worst = same + s, total + nodes, max(worst, w)
        lines.append(
            f"{mode}: {on[0] + off[0]}/{total} rows bitwise equal (chain "
            f"{on[0]}/{on[1]}, branches {off[0]}/{off[1]}), {same}/{total} same "
            f"argmax, max |diff| {worst:.3g}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="as adapld's --model (default: embedded)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="2_rename_method_sched", help="an edit case's name")
    parser.add_argument("--trees", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=65)
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_profile import case_prompt  # the same edit case prompt as the profile's

    loaded, prompt = case_prompt(args.model, args.device, args.task)
    print(f"{loaded.name} on {loaded.device}, {loaded.dtype}: {args.trees} trees x {args.nodes} "
          f"nodes after {len(prompt.ids)} prompt tokens")  # fmt: skip
    for line in run(loaded.model, prompt.ids, args.trees, args.nodes):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
