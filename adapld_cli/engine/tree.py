"""Draft trees: construction, the tree-attention mask, and the acceptance walk.

A :class:`DraftTree` holds nodes in topological order. Node 0 is the root: the pending
token, already emitted but not yet in the KV cache. Every other node is a draft token whose
parent is the token it follows. One forward pass over all nodes, with :func:`tree_mask`
letting each node see the cached prefix, its ancestors and itself, gives at every node the
model's prediction for the token after it. :func:`accept` walks from the root along children
that carry the model's chosen token: exactly what sequential decoding would have produced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from adapld_cli.engine.transfer import to_device
from adapld_cli.engine.types import Source


@dataclass
class DraftTree:
    """Nodes in topological order; node 0 is the root (the pending token)."""

    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    sources: list[Source] = field(default_factory=lambda: [Source.MODEL])
    depths: list[int] = field(default_factory=lambda: [0])
    children: list[dict[int, int]] = field(default_factory=lambda: [{}])
    kind: str = "none"  # "lexical" | "semantic" | "none": what the drafter found
    looked_up: bool = False  # the drafter queried its lexical index this step

    @classmethod
    def root(cls, token: int) -> DraftTree:
        return cls(tokens=[int(token)])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def num_drafts(self) -> int:
        return len(self.tokens) - 1

    @property
    def is_chain(self) -> bool:
        """True when every node's parent is the node before it (a causal mask suffices)."""
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def add(self, token: int, parent: int, source: Source) -> int:
        """Add a node under ``parent``; returns its index (the existing one if a sibling
        already carries ``token``)."""
        token = int(token)
        existing = self.children[parent].get(token)
        if existing is not None:
            return existing
        idx = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.sources.append(source)
        self.depths.append(self.depths[parent] + 1)
        self.children.append({})
        self.children[parent][token] = idx
        return idx

    def add_chain(self, tokens: Sequence[int], parent: int, source: Source, budget: int) -> int:
        """Add ``tokens`` as a chain under ``parent`` while ``len(self) - 1 < budget``;
        returns the index of the last node added (``parent`` if none)."""
        for t in tokens:
            if self.num_drafts >= budget:
                break
            parent = self.add(t, parent, source)
        return parent


def tree_mask(parents: Sequence[int], past_len: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive attention mask ``[1, 1, n, past_len + n]``: 0 where a node may attend (the
    whole cached prefix, its ancestors, itself), ``finfo(dtype).min`` elsewhere.

    A float mask, never bool: a bool 4D mask is silently wrong under eager attention.
    """
    n = len(parents)
    # built where it is used: only the n x n ancestor block crosses from the host
    mask = torch.full((n, past_len + n), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :past_len] = 0
    mask[:, past_len:].masked_fill_(to_device(ancestors(parents), device, torch.bool), 0)
    return mask[None, None]


def ancestors(parents: Sequence[int] | None, size: int | None = None) -> torch.Tensor:
    """``anc [size, size]`` bool on the host: ``anc[i, j]`` when node ``j`` is ``i`` or an
    ancestor of ``i`` (``parents`` in topological order; None = a chain of ``size`` nodes).
    Rows past ``len(parents)`` (padding up to ``size``) see only themselves."""
    return torch.from_numpy(ancestor_rows(parents, size))


def ancestor_rows(parents: Sequence[int] | None, size: int | None = None) -> np.ndarray:
    """:func:`ancestors` as a numpy array: a tree's rows ORed in numpy, host work before
    every tree pass that tensors made several times dearer (docs/design.md, "Host work
    before a pass")."""
    if parents is None:
        assert size is not None
        return np.tri(size, dtype=bool)
    anc = np.eye(size or len(parents), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] |= anc[p]
    return anc


def accept(tree: DraftTree, choose: Callable[[int], int]) -> tuple[list[int], int]:
    """Walk from the root: at each node the model's token is ``choose(node)``; step into the
    child carrying it, else stop.

    Returns ``(path, bonus)``: ``path`` = accepted node indices, root first; ``bonus`` = the
    model's token after the last accepted node. Emitted tokens are the path's draft tokens
    (path[1:]) followed by ``bonus``. ``choose`` is called once per emitted token, in order,
    so a sampler draws its random numbers exactly as sequential sampling would.
    """
    path = [0]
    node = 0
    while True:
        tok = choose(node)
        child = tree.children[node].get(tok)
        if child is None:
            return path, tok
        path.append(child)
        node = child
