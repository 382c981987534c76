"""4- and 6-bit weights on a CPU, computed exactly as the GGUF stores them, batch-invariant.

Contract:
- :func:`unavailable` says in one line why the quantized kernels cannot run here (neither
  AVX-512 BF16 nor AVX2 + FMA, no C++ compiler or ninja, a failed build), or None.
  :func:`extension` builds ``qmm.cpp`` once into the adapld cache (under a file lock; later
  loads reuse the build; its time: docs/performance.md, "Figures behind code decisions") and
  returns the module.
- :class:`QuantLinear` is a linear layer over bfloat16 inputs whose weights stay in the
  GGUF's integers and scales: ``q4`` (Q4_K: 4-bit values, per group of 32 a 6-bit scale and
  min, per 256 a float16 ``d``/``dmin``) and ``q6`` (Q6_K: signed 6-bit values, per group of
  16 an int8 scale, per 256 a float16 ``d``). Its inputs go in as int8 per row and 256
  inputs (the GGUF's own Q8_K), or as bfloat16 (:func:`resolve_activations`,
  ``$ADAPLD_ACTIVATIONS``). ``qmm.cpp`` is built for AVX-512 (BF16 + VNNI) or, through
  ``qmm_avx2.h``, for AVX2 + FMA (:func:`target`; ``$ADAPLD_QMM_TARGET`` forces one), the
  two bit for bit alike. Every row of an M-row call is bit
  for bit the row computed alone, for any M (see ``qmm.cpp``), so with
  :mod:`adapld_cli.model.kernels`' exact attention a draft tree's rows equal single decoding
  steps, as with packed bfloat16.
  The weights are those of the GGUF (``w = d*sc*q - dmin*m``); sums in float32 (bfloat16
  inputs) or exact integers per super-block, then float32 (int8 inputs).
- ``q8``: the GGUF formats of 32-input groups (:data:`Q8_TYPES`: Q8_0, Q5_0, Q5_1, Q4_0,
  Q4_1, Q5_K) as one byte a weight, ``w = s * (u - z) - mn``; int8 inputs only (with
  ``bfloat16`` activations the loader makes such a layer a bfloat16 ``nn.Linear`` of
  :func:`unpack_q8`'s weights, which the exact kernels then pack like any other). A byte a
  weight is more memory than the file's 4.5-8.5 bits; the products are exact integers all
  the same.
- :func:`gguf_parts` reads raw GGUF blocks of any type above (:func:`q4k_parts`,
  :func:`q6k_parts`, :func:`q8_parts`); :func:`quantize_q4` / :func:`quantize_q6` /
  :func:`quantize_q8` make the same parts from float weights (tests, models without a GGUF);
  :func:`pack` turns parts into the kernel layout (a dict of tensors, what the cache stores).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

KINDS = ("q4", "q6", "q8")
GROUP = {"q4": 32, "q6": 16, "q8": 32}
# GGUF types of 32-input groups that the q8 kind holds exactly: values as bytes u with the
# format's zero point z, w = s * (u - z) - mn (s, mn float32 per group; Q5_K's s = d * sc and
# mn = dmin * m are exact float32 products)
Q8_TYPES = ("Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q5_K")
SUPER = 256  # inputs per float16 d (a GGUF K-quant super-block)
SOURCE = Path(__file__).with_name("qmm.cpp")
HEADERS = tuple(
    SOURCE.with_name(n) for n in ("qmm_avx2.h", "amx_tiles.h", "qmm_amx.h", "attn_amx.h")
)  # its includes
# The build targets: the CPU flags each needs (as /proc/cpuinfo names them) and its compiler
# flags. amx: the native form plus qmm_amx.h, the int8 products of 32+ rows on AMX tiles (the
# same integers, so the same results). avx512: the native form. avx2: the same source through
# qmm_avx2.h, every 512-bit operation as two 256-bit ones (int8 products by vpmaddubsw +
# vpmaddwd, exact for these operands). The first target the CPU has is built.
_AVX512 = (
    ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"),
    ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mavx512vnni"),
)
TARGETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "amx": (
        _AVX512[0] + ("amx_tile", "amx_int8", "amx_bf16"),
        _AVX512[1] + ("-mamx-tile", "-mamx-int8", "-mamx-bf16"),
    ),
    "avx512": _AVX512,
    "avx2": (("avx2", "fma", "f16c"), ("-mavx2", "-mfma", "-mf16c")),
}
ENV_TARGET = "ADAPLD_QMM_TARGET"  # auto (the first the CPU has) or a key of TARGETS
# 0: the amx build's attention on the vector kernels (attn_amx.h reads it once; the
# cross-build test compares the rest of that build with avx512 bit for bit)
ENV_ATTN_TILES = "ADAPLD_ATTN_TILES"
COMMON_CFLAGS = ["-O3", "-fopenmp"]
# -fopenmp: at::parallel_for runs on OpenMP; the extension binds to the libgomp torch loaded

ACTIVATIONS = ("int8", "bfloat16")
ENV_ACTIVATIONS = "ADAPLD_ACTIVATIONS"

# module name (one per source digest) -> (its library file, the module loaded from it): a
# process loads one module per digest, whatever the $ADAPLD_HOME (a second copy of the same
# pybind11 classes cannot be registered in one process)
_EXT: dict[str, tuple[Path, Any]] = {}
_FAILED: str | None = None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _wanted_target() -> str:
    import os

    return (os.environ.get(ENV_TARGET, "") or "auto").strip().lower()


def target() -> str | None:
    """The build target of this CPU (a key of :data:`TARGETS`), or None where it has neither
    AVX-512 BF16 nor AVX2 + FMA. ``$ADAPLD_QMM_TARGET`` names one (an AVX-512 CPU can run the
    AVX2 build: the tests compare the two); None where the CPU lacks it."""
    flags, wanted = _cpu_flags(), _wanted_target()
    names = list(TARGETS) if wanted == "auto" else [wanted] if wanted in TARGETS else []
    return next((name for name in names if set(TARGETS[name][0]) <= flags), None)


def cflags() -> list[str]:
    """The compiler flags of this CPU's target (see :func:`target`)."""
    name = target()
    return COMMON_CFLAGS + (list(TARGETS[name][1]) if name else [])


@functools.lru_cache(maxsize=1)
def _static_reason() -> str | None:
    import shutil

    if target() is None:
        wanted = _wanted_target()
        if wanted == "auto":
            return "this CPU has neither AVX-512 BF16 nor AVX2 with FMA"
        if wanted not in TARGETS:
            return f"{ENV_TARGET}={wanted}: use one of auto, {', '.join(TARGETS)}"
        return f"{ENV_TARGET}={wanted}: this CPU lacks " + ", ".join(
            sorted(set(TARGETS[wanted][0]) - _cpu_flags())
        )
    if shutil.which("c++") is None and shutil.which("g++") is None:
        return "no C++ compiler (c++/g++) on PATH"
    _ninja_on_path()
    try:
        from torch.utils.cpp_extension import verify_ninja_availability

        verify_ninja_availability()
    except RuntimeError:
        return "ninja is not installed"
    return None


def _ninja_on_path() -> None:
    """Put the ``ninja`` wheel's binary (a dependency) on PATH for torch's extension builder,
    also when adapld runs from a virtual environment that is not activated."""
    import os

    try:
        import ninja
    except ImportError:
        return
    folder = str(getattr(ninja, "BIN_DIR", ""))
    path = os.environ.get("PATH", "")
    if folder and folder not in path.split(os.pathsep):
        os.environ["PATH"] = folder + os.pathsep + path


def unavailable() -> str | None:
    """Why the quantized kernels cannot run here (one line), or None. Does not build."""
    return _FAILED or _static_reason()


def resolve_activations(value: str | None = None) -> str:
    """How the quantized linears take their inputs: ``value``, else ``$ADAPLD_ACTIVATIONS``,
    else ``int8`` (the faster on both targets: docs/performance.md, "Figures behind code
    decisions"). Both forms run wherever the kernels do; an unknown value raises
    ``ValueError``."""
    import os

    name = (value or os.environ.get(ENV_ACTIVATIONS, "") or "auto").strip().lower()
    if name == "auto":
        return "int8"
    if name not in ACTIVATIONS:
        raise ValueError(f"{ENV_ACTIVATIONS}={name}: use one of auto, {', '.join(ACTIVATIONS)}")
    return name


@functools.lru_cache(maxsize=1)
def _digest() -> str:
    import torch

    sources = b"".join(path.read_bytes() for path in (SOURCE, *HEADERS))
    data = sources + " ".join(cflags()).encode() + torch.__version__.encode()
    return hashlib.sha256(data).hexdigest()[:12]


def _build_dir() -> tuple[Path, str]:
    from adapld_cli.model.paths import cache_dir

    return cache_dir() / "kernels" / f"qmm-{_digest()}", f"adapld_qmm_{_digest()}"


def extension(progress: bool = False) -> Any:
    """The ``qmm`` module built in this ``$ADAPLD_HOME`` (built there first if needed, so a
    later process finds it); raises ``RuntimeError`` (one line) where it cannot be had. A
    process loads it once: a later ``$ADAPLD_HOME`` gets a copy of the library file loaded
    (same digest, same binary) and the loaded module."""
    global _FAILED
    folder, name = _build_dir()
    library = folder / f"{name}.so"
    if name in _EXT and library.is_file():
        return _EXT[name][1]
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    import contextlib
    import io

    from filelock import FileLock
    from torch.utils.cpp_extension import load

    from adapld_cli.model.progress import step

    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(folder) + ".lock"), contextlib.ExitStack() as stack:
            if name in _EXT:  # loaded from another home: give this one the same file
                _copy(_EXT[name][0], library)
            elif library.is_file():  # built: import it (torch's loader would take its own lock)
                _EXT[name] = (library, _import(library, name))
            else:
                stack.enter_context(step(progress, "Building the 4-bit CPU kernels (one time)"))
                # torch's build lock file left by a process killed mid-build would make load()
                # wait forever; any build here runs under our lock, so one present now is stale
                (folder / "lock").unlink(missing_ok=True)
                with contextlib.redirect_stdout(io.StringIO()):
                    module = load(
                        name=name,
                        sources=[str(SOURCE)],
                        extra_cflags=cflags(),
                        extra_ldflags=["-fopenmp"],
                        build_directory=str(folder),
                        verbose=False,
                    )
                _EXT[name] = (library, module)
    except Exception as exc:  # a compiler error is long; keep its first line
        _FAILED = (
            "building the 4-bit kernels failed: "
            + (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        )
        raise RuntimeError(_FAILED) from exc
    return _EXT[name][1]


def _copy(source: Path, target: Path) -> None:
    """Copy a built library into another home, atomically (a reader never sees half)."""
    import os
    import shutil

    part = target.with_name(target.name + ".part")
    shutil.copyfile(source, part)
    os.replace(part, target)


def _import(library: Path, name: str) -> Any:
    """Import the built extension module from its file."""
    import importlib.util

    import torch  # noqa: F401  (the library links against torch's)

    spec = importlib.util.spec_from_file_location(name, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- parts


def q4k_parts(blocks: Any, n: int, k: int) -> dict[str, Any]:
    """Q4_K blocks (uint8 ``[n * k / 256, 144]``) of an ``[n, k]`` weight -> integer parts:
    ``q [n, k]`` 0..15, ``sc``/``mn [n, k/32]`` 0..63, ``d``/``dmin [n, k/256]`` float32."""
    import numpy as np
    import torch
    from gguf.quants import Q4_K

    blocks = np.asarray(blocks, dtype=np.uint8).reshape(-1, 144)
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].view(np.float16).astype(np.float32)
    sc, mn = Q4_K.get_scale_min(blocks[:, 4:16])
    shifts = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    q = (blocks[:, 16:].reshape(-1, 4, 1, 32) >> shifts) & 0x0F

    def t(a: Any, cols: int) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a).reshape(n, cols))

    return {
        "q": t(q.astype(np.uint8), k),
        "sc": t(sc.astype(np.uint8), k // 32),
        "mn": t(mn.astype(np.uint8), k // 32),
        "d": t(d, k // SUPER),
        "dmin": t(dmin, k // SUPER),
    }


def q6k_parts(blocks: Any, n: int, k: int) -> dict[str, Any]:
    """Q6_K blocks (uint8 ``[n * k / 256, 210]``) -> ``q [n, k]`` int8 -32..31, ``sc [n, k/16]``
    int8, ``d [n, k/256]`` float32 (the layout of ``gguf.quants.Q6_K``)."""
    import numpy as np
    import torch

    blocks = np.asarray(blocks, dtype=np.uint8).reshape(-1, 210)
    ql, qh, sc, d = blocks[:, :128], blocks[:, 128:192], blocks[:, 192:208], blocks[:, 208:]
    ql = (ql.reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F
    qh = qh.reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q = (ql.reshape(-1, 2, 4, 32) | ((qh & 0x03) << 4)).astype(np.int8) - np.int8(32)

    def t(a: Any, cols: int) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a).reshape(n, cols))

    return {
        "q": t(q, k),
        "sc": t(sc.view(np.int8), k // 16),
        "d": t(d.view(np.float16).astype(np.float32), k // SUPER),
    }


def gguf_parts(ggml_type: str, blocks: Any, n: int, k: int) -> tuple[str, dict[str, Any]]:
    """(kind, integer parts) of an ``[n, k]`` weight stored as GGUF ``ggml_type`` blocks."""
    if ggml_type == "Q4_K":
        return "q4", q4k_parts(blocks, n, k)
    if ggml_type == "Q6_K":
        return "q6", q6k_parts(blocks, n, k)
    return "q8", q8_parts(ggml_type, blocks, n, k)


def q8_parts(ggml_type: str, blocks: Any, n: int, k: int) -> dict[str, Any]:
    """Blocks of a :data:`Q8_TYPES` type (the layouts of ``gguf.quants``) -> ``q [n, k]``
    uint8 values ``u``, ``s``/``mn [n, k/32]`` float32, ``z`` the zero point, ``mins``
    whether ``mn`` is used: ``w = s * (u - z) - mn``, the value ``gguf`` dequantises."""
    import numpy as np
    import torch
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    if ggml_type not in Q8_TYPES:
        raise ValueError(f"{ggml_type} is not a q8 type ({', '.join(Q8_TYPES)})")
    size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]][1]  # bytes a block
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, size)
    nb = len(b)

    def f16(a: Any) -> Any:
        return np.ascontiguousarray(a).view(np.float16).astype(np.float32)

    def nibbles(qs: Any) -> Any:  # [nb, 16] -> [nb, 32]: low nibbles, then high
        return np.concatenate([qs & 0x0F, qs >> 4], axis=1)

    def high_bits(qh: Any) -> Any:  # [nb, 4] (a little-endian uint32) -> [nb, 32] 0/1
        bits = np.ascontiguousarray(qh).view(np.uint32).reshape(nb, 1)
        return ((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)

    zero, mins = 0, False
    mn = np.zeros((nb, 1), np.float32)
    if ggml_type == "Q8_0":
        s, q = f16(b[:, 0:2]), (b[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        zero = 128
    elif ggml_type in ("Q4_0", "Q5_0"):
        s = f16(b[:, 0:2])
        q = nibbles(b[:, 2:18]) if ggml_type == "Q4_0" else nibbles(b[:, 6:22])
        if ggml_type == "Q5_0":
            q = q | (high_bits(b[:, 2:6]) << 4)
        zero = 8 if ggml_type == "Q4_0" else 16
    elif ggml_type in ("Q4_1", "Q5_1"):
        s, mn, mins = f16(b[:, 0:2]), -f16(b[:, 2:4]), True
        q = nibbles(b[:, 4:20]) if ggml_type == "Q4_1" else nibbles(b[:, 8:24])
        if ggml_type == "Q5_1":
            q = q | (high_bits(b[:, 4:8]) << 4)
    else:  # Q5_K
        from gguf.quants import Q4_K

        d, dmin = f16(b[:, 0:2]), f16(b[:, 2:4])
        sc, m = Q4_K.get_scale_min(b[:, 4:16])  # [nb, 8] each
        s = (d * sc.reshape(nb, 8).astype(np.float32)).reshape(-1, 1)
        mn = (dmin * m.reshape(nb, 8).astype(np.float32)).reshape(-1, 1)
        mins = True
        qh, qs = b[:, 16:48], b[:, 48:176]
        low = (qs.reshape(nb, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 15
        high = (qh.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
        q = low.reshape(nb, 8, 32) | (high << 4)
    groups = k // 32

    def t(a: Any, cols: int) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a).reshape(n, cols))

    return {
        "q": t(q.astype(np.uint8), k),
        "s": t(s.astype(np.float32), groups),
        "mn": t(np.broadcast_to(mn, s.shape).astype(np.float32), groups),
        "z": zero,
        "mins": mins,
    }


def _two_level(scale: Any, per: int, top: int) -> tuple[Any, Any]:
    """Per-group float scales ``[n, g]`` -> (float16-exact ``d [n, ceil(g/per)]`` per
    super-block of ``per`` groups, integer multipliers ``[n, g]`` in ``-top..top``) with
    ``d * mult ~= scale``."""
    import torch

    n, g = scale.shape
    blocks = -(-g // per)
    padded = torch.zeros(n, blocks * per)
    padded[:, :g] = scale
    d = (padded.reshape(n, blocks, per).abs().amax(-1) / top).half().float()
    d = torch.where(d > 0, d, torch.ones_like(d))
    mult = torch.round(scale / d.repeat_interleave(per, 1)[:, :g]).clamp(-top, top)
    return d, mult


def quantize_q4(w: Any) -> dict[str, Any]:
    """Float weight ``[n, k]`` (k a multiple of 32) -> Q4_K-style parts (see :func:`q4k_parts`)."""
    import torch

    n, k = w.shape
    groups = w.float().reshape(n, k // 32, 32)
    lo = groups.amin(-1).clamp(max=0)
    hi = groups.amax(-1)
    d, sc = _two_level((hi - lo) / 15, 8, 63)
    dmin, mn = _two_level(-lo, 8, 63)
    step = d.repeat_interleave(8, 1)[:, : k // 32] * sc
    low = dmin.repeat_interleave(8, 1)[:, : k // 32] * mn
    step = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round((groups + low[..., None]) / step[..., None]).clamp(0, 15)
    return {
        "q": q.reshape(n, k).to(torch.uint8),
        "sc": sc.to(torch.uint8),
        "mn": mn.to(torch.uint8),
        "d": d,
        "dmin": dmin,
    }


def quantize_q6(w: Any) -> dict[str, Any]:
    """Float weight ``[n, k]`` (k a multiple of 16) -> Q6_K-style parts (see :func:`q6k_parts`)."""
    import torch

    n, k = w.shape
    groups = w.float().reshape(n, k // 16, 16)
    d, sc = _two_level(groups.abs().amax(-1) / 31, 16, 127)
    step = d.repeat_interleave(16, 1)[:, : k // 16] * sc
    step = torch.where(step != 0, step, torch.ones_like(step))
    q = torch.round(groups / step[..., None]).clamp(-32, 31)
    return {"q": q.reshape(n, k).to(torch.int8), "sc": sc.to(torch.int8), "d": d}


def quantize_q8(w: Any) -> dict[str, Any]:
    """Float weight ``[n, k]`` (k a multiple of 32) -> Q8_0-style q8 parts (float16 ``s`` per
    group, ``u = q + 128``; see :func:`q8_parts`)."""
    import torch

    n, k = w.shape
    groups = w.float().reshape(n, k // 32, 32)
    s = (groups.abs().amax(-1) / 127).half().float()
    step = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.round(groups / step[..., None]).clamp(-127, 127) + 128
    return {"q": q.reshape(n, k).to(torch.uint8), "s": s, "mn": torch.zeros_like(s), "z": 128,
            "mins": False}  # fmt: skip


def dequantize(kind: str, parts: dict[str, Any]) -> Any:
    """The float32 weight ``[n, k]`` the parts stand for (reference for tests)."""
    if kind == "q8":  # s * (u - z) - mn, per input
        u = parts["q"].float() - parts["z"]
        w = u * parts["s"].repeat_interleave(32, 1)
        return w - parts["mn"].repeat_interleave(32, 1) if parts["mins"] else w
    q = parts["q"].float()
    n, k = q.shape
    group = GROUP[kind]

    def per_input(a: Any) -> Any:  # [n, groups] -> [n, k]
        return a.float().repeat_interleave(group, 1)

    per = SUPER // group
    scale = per_input(parts["d"].repeat_interleave(per, 1)[:, : k // group] * parts["sc"].float())
    w = q * scale
    if kind == "q4":
        mins = parts["dmin"].repeat_interleave(per, 1)[:, : k // group] * parts["mn"].float()
        w = w - per_input(mins)
    return w


# ----------------------------------------------------------------------------- layout


def fits(kind: str, n: int, k: int) -> bool:
    """Whether an ``[n, k]`` weight can take the kernel layout of ``kind``."""
    return n % 16 == 0 and k % GROUP[kind] == 0


def pack(kind: str, parts: dict[str, Any]) -> dict[str, Any]:
    """Integer parts -> the kernel's tensors ``{"qp", "sc", "dd"}`` (layouts in ``qmm.cpp``)."""
    import torch

    q = parts["q"]
    n, k = q.shape
    tiles = n // 16

    def per_tile(a: Any) -> Any:  # [n, c] -> [tiles, c, 16]
        return a.reshape(tiles, 16, -1).permute(0, 2, 1)

    if kind == "q8":  # [tiles, groups, 8 dwords, 16 columns, 4 bytes]
        qp = q.reshape(tiles, 16, k // 32, 8, 4).permute(0, 2, 3, 1, 4).reshape(tiles, k // 32, -1)
        sc = torch.tensor([int(parts["z"]), int(parts["mins"])], dtype=torch.int32)
        dd = torch.stack([per_tile(parts["s"]), per_tile(parts["mn"])], 2)  # [tiles, G, 2, 16]
    elif kind == "q4":
        pairs = q.reshape(tiles, 16, k // 2, 2).permute(0, 2, 1, 3)  # [tiles, k/2, 16, 2]
        qp = pairs[..., 0] | (pairs[..., 1] << 4)  # [tiles, k/2 (pair p), 16 (column c)]
        # per group of 32: byte 64 j + 4 c + k holds pair 4 j + k of column c (qmm.cpp)
        qp = qp.reshape(tiles, k // 32, 4, 4, 16).transpose(3, 4).reshape(tiles, k // 2, 16)
        sc = torch.stack([per_tile(parts["sc"]), per_tile(parts["mn"])], 2)
        dd = torch.stack([per_tile(parts["d"]), per_tile(parts["dmin"])], 2)
    else:
        qp = pack_q6_values(q)
        sc, dd = per_tile(parts["sc"]), per_tile(parts["d"])
    return {
        "qp": qp.contiguous(),
        "sc": sc.contiguous(),
        "dd": dd.float().contiguous(),
    }


def unpack_q8(packed: dict[str, Any]) -> Any:
    """The float32 weight ``[n, k]`` of a packed q8 layer (:func:`pack`'s inverse, then
    :func:`dequantize`)."""
    qp, dd = packed["qp"], packed["dd"]
    tiles, groups = qp.shape[:2]
    q = qp.reshape(tiles, groups, 8, 16, 4).permute(0, 3, 1, 2, 4).reshape(tiles * 16, -1)

    def rows(a: Any) -> Any:  # [tiles, groups, 16] -> [n, groups]
        return a.permute(0, 2, 1).reshape(tiles * 16, groups)

    z, mins = (int(v) for v in packed["sc"].tolist())
    parts = {"q": q, "s": rows(dd[:, :, 0]), "mn": rows(dd[:, :, 1]), "z": z, "mins": bool(mins)}
    return dequantize("q8", parts)


def pack_q6_values(q: Any) -> Any:
    """Q6_K values ``q [n, k]`` (-32..31) -> uint8 ``[n / 16, k / 16, 192]``: per tile of 16
    columns and group of 16 inputs, ``u = q + 32`` as 128 bytes of low nibbles in q4's layout
    (per block ``b`` of 8 inputs a dword a column, byte ``64 b + 4 c + k`` = ``u[c][8b + 2k]
    & 15 | (u[c][8b + 2k + 1] & 15) << 4``), then 64 bytes of the high two bits, a dword a
    column whose byte ``m`` holds ``u[c][8b + p + 2m] >> 4`` at bits ``2 (2b + p)``: 6 bits
    a weight, as in the GGUF (``qmm.cpp``, ``unpack_q6_u``)."""
    import torch

    n, k = q.shape
    tiles, groups = n // 16, k // 16
    u = (q.to(torch.int16) + 32).to(torch.uint8)
    u = u.reshape(tiles, 16, groups, 2, 4, 2)  # [tiles, column, group, b, m, p]
    low, high = u & 15, u >> 4
    nibbles = low[..., 0] | (low[..., 1] << 4)  # [tiles, column, group, b, k]
    nibbles = nibbles.permute(0, 2, 3, 1, 4)  # [tiles, group, b, column, k]
    tops = torch.zeros(tiles, 16, groups, 4, dtype=torch.uint8)  # [tiles, column, group, m]
    for b in range(2):
        for p in range(2):
            tops |= high[:, :, :, b, :, p] << (2 * (2 * b + p))
    tops = tops.permute(0, 2, 1, 3)  # [tiles, group, column, m]
    return torch.cat(
        [nibbles.reshape(tiles, groups, 128), tops.reshape(tiles, groups, 64)], -1
    ).contiguous()


def _quant_linear_class() -> type:
    import torch

    class QuantLinear(torch.nn.Module):
        """A linear layer on the ``qmm`` kernels: ``x [..., in] -> [..., out]`` in bfloat16,
        the bias added in float32 before the one rounding. ``activations``: ``int8`` (the
        inputs quantized per row and 256 inputs, VNNI products) or ``bfloat16`` (the inputs
        as they are); default :func:`resolve_activations`."""

        def __init__(
            self,
            kind: str,
            packed: dict[str, torch.Tensor],
            in_features: int,
            bias: torch.Tensor | None = None,
            activations: str | None = None,
        ) -> None:
            super().__init__()
            self.kind, self.in_features = kind, in_features
            self.out_features = packed["qp"].shape[0] * 16
            for key in ("qp", "sc", "dd"):
                self.register_buffer(key, packed[key], persistent=False)
            fbias = None if bias is None else bias.detach().float().contiguous()
            self.register_buffer("fbias", fbias, persistent=False)
            ext = self.ext = extension()
            self.activations = activations or resolve_activations()
            self.int8 = self.activations == "int8"
            # what the int8 form needs beside the weights (q6: a per-column constant)
            offsets = ext.offsets_i8(kind, packed["qp"], packed["sc"]) if self.int8 else None
            self.register_buffer("offsets", offsets, persistent=False)
            self.run = getattr(ext, f"mm_{kind}", None)
            self.run_i8 = ext.mm_i8
            self.dtype = torch.bfloat16
            if kind == "q8" and not self.int8:  # the loader makes those bfloat16 linears
                raise ValueError("q8 weights take int8 inputs only")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).to(torch.bfloat16).contiguous()  # [M, in]
            if self.int8:
                y = self.run_i8(
                    self.kind, x2, self.qp, self.sc, self.dd, self.offsets, self.fbias, False
                )
            else:
                y = self.run(x2, self.qp, self.sc, self.dd, self.fbias, False)
            return y.reshape(*shape[:-1], self.out_features)

        def extra_repr(self) -> str:
            return (
                f"{self.kind}, in_features={self.in_features}, "
                f"out_features={self.out_features}, activations={self.activations}"
            )

    return QuantLinear


_CLASS: type | None = None


def quant_linear_class() -> type:
    """The ``QuantLinear`` class (defined on first use: keeps torch out of imports)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _quant_linear_class()
    return _CLASS


def quantize_model(model: Any, kind: str = "q4") -> int:
    """Replace every ``nn.Linear`` (and GPT-2 ``Conv1D``) of a bfloat16 CPU model whose shape
    fits by a :class:`QuantLinear` of its weights quantized as ``kind``; returns how many.

    For models without a GGUF (tests, comparisons): a GGUF's own integers are kept instead by
    the converter (``convert.QUANT``).
    """
    import torch
    from transformers.pytorch_utils import Conv1D

    cls = quant_linear_class()
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if not isinstance(child, (torch.nn.Linear, Conv1D)):
                continue
            w = child.weight.detach()
            w = w if isinstance(child, torch.nn.Linear) else w.t()  # Conv1D stores [in, out]
            n, k = w.shape
            if fits(kind, n, k):
                parts = {"q4": quantize_q4, "q6": quantize_q6, "q8": quantize_q8}[kind](w)
                setattr(module, name, cls(kind, pack(kind, parts), k, child.bias))
                count += 1
    return count
