"""Host data onto the device without waiting for it.

``torch.tensor(data, device="cuda")`` (and ``.to("cuda")`` of a pageable host tensor) copies
and then synchronizes the stream: the host waits for every kernel queued before it. A decode
step made three such copies besides its one necessary read (the argmax of the pass), each a
wait on the GPU (docs/design.md, "Host copies without a wait"). Staged in
pinned memory and copied with ``non_blocking``, the copy is queued like a kernel, in stream
order, and the host goes on; torch's pinned-memory cache keeps the staging block until the
copy is done. On other devices this is ``torch.tensor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def to_device(
    data: torch.Tensor | Sequence[Any],
    device: Any,
    dtype: Any = torch.int64,
    out: torch.Tensor | None = None,
) -> Any:
    """``data`` (a host tensor or nested lists) as a ``dtype`` tensor on ``device``; on CUDA
    through pinned memory, queued without a host-device sync (module docstring). ``out``: a
    device tensor of the same shape to copy into instead (a static pass's fixed input
    buffer), returned."""
    host = data if isinstance(data, torch.Tensor) else torch.tensor(data, dtype=dtype)
    host = host.to(out.dtype if out is not None else dtype)
    cuda = torch.device(device).type == "cuda"
    if out is not None:
        return out.copy_(host.pin_memory() if cuda else host.to(device), non_blocking=cuda)
    if not cuda:
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
