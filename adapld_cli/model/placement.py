"""Where the weights go and in which dtype, decided before anything is loaded.

Contract: :func:`resolve_placement` maps the user's ``--device`` / ``--dtype`` to an accelerate
``device_map`` and a torch dtype name. No device: ``device_map="auto"`` (all visible GPUs via
accelerate) when CUDA is available, else CPU. ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``
force one. dtype ``"auto"`` is bfloat16 on CUDA (float16 where the GPU lacks bfloat16), float16
on MPS; on CPU bfloat16 where the CPU computes it natively (AVX-512 BF16 or AMX, see
:func:`cpu_bf16`) and adapld's batch-invariant kernels are on (``$ADAPLD_KERNELS`` unset or
``exact``: then speculative decoding stays bit-exact in bfloat16), else float32. Unusable
choices raise :class:`ModelError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapld_cli.model.errors import ModelError

DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class Placement:
    """``device_map`` for ``from_pretrained``; ``device`` label; ``dtype`` name."""

    device_map: Any
    device: str
    dtype: str

    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)


def _device(device: str | None) -> tuple[Any, str]:
    import torch

    if device is None or device.strip().lower() == "auto":
        if torch.cuda.is_available():
            return "auto", "cuda"
        return {"": "cpu"}, "cpu"
    name = device.strip().lower()
    if name == "cpu":
        return {"": "cpu"}, "cpu"
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ModelError(f"--device {device}: CUDA is not available on this machine")
        if name == "cuda":
            return "auto", "cuda"
        index = name.split(":", 1)[1]
        if not index.isdigit() or int(index) >= torch.cuda.device_count():
            raise ModelError(
                f"--device {device}: no such GPU ({torch.cuda.device_count()} visible)"
            )
        return {"": name}, name
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ModelError(f"--device {device}: Apple MPS is not available on this machine")
        return {"": "mps"}, "mps"
    raise ModelError(f"unknown --device {device!r}: use cpu, cuda, cuda:N or mps")


def resolve_placement(device: str | None = None, dtype: str = "auto") -> Placement:
    """Decide device map, device label and dtype name for a load."""
    import torch

    device_map, label = _device(device)
    name = (dtype or "auto").strip().lower()
    if name == "auto":
        if label.startswith("cuda"):
            name = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        elif label == "mps":
            name = "float16"
        else:
            name = "bfloat16" if cpu_bf16() and _exact_kernels() else "float32"
    elif name not in DTYPES:
        raise ModelError(f"unknown --dtype {dtype!r}: use auto, {', '.join(DTYPES)}")
    return Placement(device_map, label, name)


def tune_attention(device_type: str) -> bool:
    """Before decoding on ``device_type``: on CUDA, switch off torch's cuDNN backend of
    ``scaled_dot_product_attention``; returns whether it did. cuDNN builds an execution graph
    for every new shape, and decoding makes one every call (each step's key count, each
    prefill chunk, each pass size), so on a GPU its host time a call far exceeds its kernel's
    and dominates a plain step (docs/design.md, "Static passes (CUDA graphs)", the cuDNN
    paragraph). Flash and memory-efficient attention, which torch picks instead, build
    nothing per shape. The flag
    is torch's, process-wide: the bench's transformers baselines run without cuDNN attention
    too."""
    if device_type != "cuda":
        return False
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)
    return True


def cpu_bf16() -> bool:
    """Whether this CPU has native bfloat16 matrix instructions (AVX-512 BF16 or AMX)."""
    import torch

    try:
        caps = torch.cpu.get_capabilities()
    except (AttributeError, RuntimeError):  # torch without capability reporting
        return False
    return bool(caps.get("avx512_bf16") or caps.get("amx_bf16"))


def _exact_kernels() -> bool:
    from adapld_cli.model.kernels import resolve_mode

    try:
        return resolve_mode() == "exact"
    except ValueError:
        return False


def physical_cores() -> int:
    """Physical CPU cores (logical CPUs when that cannot be told)."""
    import os

    try:
        cores = set()
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            phys = core = None
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    core = value.strip()
                elif not line.strip():
                    if core is not None:
                        cores.add((phys, core))
                    phys = core = None
        if cores:
            return len(cores)
    except OSError:
        pass
    return os.cpu_count() or 1


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op CPU threads (default: physical cores); return the number set."""
    import torch

    n = threads or physical_cores()
    torch.set_num_threads(n)
    return n
