"""Convert a GGUF checkpoint once into a safetensors folder that reloads in seconds.

Contract: :func:`convert_gguf` produces ``target``: a transformers folder (config, tokenizer
with its chat template, generation config, ``model.safetensors``) plus a manifest
``adapld-manifest.json`` written last. Weights are dequantised one tensor at a time (the
``gguf`` package's reader and dequantiser) and streamed to disk, so memory stays near one
tensor plus the mapped file. Float tensors keep their GGUF type; quantised ones are stored as
bfloat16 (half of float32; ``from_pretrained`` upcasts to the dtype asked for). An input
embedding that is quantised and not tied to the output layer stays in its GGUF blocks in
``adapld-packed-embedding.safetensors`` and is dequantised at load by :func:`restore_packed`
(exact values, a quarter of the disk). With ``quantized=True`` the linear layers stored as
a type of :data:`QUANT_TYPES` (Q4_K, Q6_K, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, Q5_K) are not
dequantised: their integers and scales go, packed for the CPU kernels of
:mod:`adapld_cli.model.quant`, into ``adapld-quant.safetensors`` (a third of the disk, and
what the kernels read). :func:`cache_state` tells whether a folder is "ready",
"stale" (another source, an older cache format or another transformers major version) or
"missing". Conversion runs under ``<target>.lock`` into a temp folder renamed into place, so
a reader never sees a partial cache and a second process waiting on the lock finds the first
one's result.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from adapld_cli.model.errors import ModelError
from adapld_cli.model.progress import step
from adapld_cli.model.quant import Q8_TYPES
from adapld_cli.model.safetensors_out import StreamWriter

MANIFEST = "adapld-manifest.json"
WEIGHTS = "model.safetensors"
PACKED = "adapld-packed-embedding.safetensors"
QUANT = "adapld-quant.safetensors"  # linears kept in their GGUF integers (model/quant.py)
# GGUF types whose linears keep their integers (model/quant.py: q8 holds the 32-input formats)
QUANT_TYPES = {"Q4_K": "q4", "Q6_K": "q6"} | {t: "q8" for t in Q8_TYPES}
# GGUF architectures whose linears stay quantized (the ones the tests run on the kernels:
# tests/test_quant.py); any other converts to bfloat16 weights
KERNEL_ARCHS = ("qwen2", "qwen3", "llama", "gemma3")
# 1: float32 safetensors written by transformers' own GGUF loader.
# 2: tensor-by-tensor conversion; bfloat16 for quantised tensors, packed input embedding.
# 3: Q6_K linears packed at 6 bits a weight (was 8: model/quant.py, pack_q6_values).
# 4: tokenizer_config.json lists the added tokens (see _save_tokenizer).
# 5: Llama's attn_q/attn_k stay quantized (rows reordered, _row_order); head_dim from the file.
# 6: Q4_K's nibbles a dword a column per 8 inputs (model/qmm.cpp, the q4 layout).
# 7: Q6_K's likewise, its high bits a dword a column per group of 16 (the q6 layout).
FORMAT = 7


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None if absent or unreadable."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _transformers_major() -> str:
    from importlib.metadata import version

    return version("transformers").split(".")[0]


def cache_state(folder: Path, source_id: str) -> str:
    """``"ready"``, ``"stale"`` or ``"missing"`` for the converted cache in ``folder``."""
    manifest = read_manifest(folder)
    if manifest is None:
        return "stale" if Path(folder).exists() else "missing"
    if (
        manifest.get("format") != FORMAT
        or manifest.get("source") != source_id
        or str(manifest.get("transformers", "")).split(".")[0] != _transformers_major()
    ):
        return "stale"
    files = manifest.get("files") or []
    if not files or not all((Path(folder) / f).is_file() for f in files):
        return "stale"
    return "ready"


def _storage_dtype(ggml_type: Any) -> Any:
    """Float tensors keep their type (lossless); quantised ones are stored as bfloat16."""
    import torch
    from gguf import GGMLQuantizationType as Q

    return {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}.get(
        ggml_type, torch.bfloat16
    )


def _is_quantized(ggml_type: Any) -> bool:
    from gguf import GGMLQuantizationType as Q

    return ggml_type not in (Q.F32, Q.F16, Q.BF16, Q.F64)


@contextmanager
def _one_reader(gguf: Path) -> Iterator[Any]:
    """Open ``gguf`` once and hand that reader (and its parsed metadata) to transformers too.

    Opening a GGUF parses every tokenizer entry, slicing a ``numpy.memmap`` several times an
    entry, which is slow for a large vocabulary; reading config and tokenizer through
    transformers would do that three times. Here it happens once, on a plain ``ndarray`` view
    of the mapping (faster slicing, the same bytes), and transformers' metadata parse is
    reused for the same path (docs/performance.md, "Figures behind code decisions").
    """
    import copy

    import gguf as gguf_package
    import numpy as np
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    real_memmap, real_reader, real_parse = (
        np.memmap,
        gguf_package.GGUFReader,
        (hf_gguf.load_gguf_checkpoint),
    )

    def plain(*args: Any, **kwargs: Any) -> Any:
        return real_memmap(*args, **kwargs).view(np.ndarray)

    np.memmap = plain  # only while the reader is built; restored just below
    try:
        reader = real_reader(str(gguf))
    finally:
        np.memmap = real_memmap
    wanted = os.path.realpath(gguf)
    parsed: dict[str, Any] = {}

    def shared(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and os.path.realpath(path) == wanted:
            return reader
        return real_reader(path, *args, **kwargs)

    def parse_once(path: Any, return_tensors: bool = False, **kwargs: Any) -> Any:
        if return_tensors or kwargs or os.path.realpath(path) != wanted:
            return real_parse(path, return_tensors=return_tensors, **kwargs)
        if "value" not in parsed:
            parsed["value"] = real_parse(path)
        return copy.deepcopy(parsed["value"])

    gguf_package.GGUFReader, hf_gguf.load_gguf_checkpoint = shared, parse_once
    try:
        yield reader
    finally:
        gguf_package.GGUFReader, hf_gguf.load_gguf_checkpoint = real_reader, real_parse


def _config_and_tokenizer(gguf: Path) -> tuple[Any, Any]:
    """The transformers config and tokenizer stored in a GGUF file's metadata (no weights)."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    eos = getattr(config, "eos_token_id", None)  # the file's tokenizer.ggml.eos_token_id
    if isinstance(eos, int) and tokenizer.eos_token_id != eos:
        # transformers 5.17 keeps its converter's default there (<|endoftext|> for Qwen2)
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    return config, tokenizer


def gguf_architecture(reader: Any) -> str | None:
    """A GGUF reader's ``general.architecture`` (``qwen2``, ``llama``, ...), or None."""
    field = reader.fields.get("general.architecture")
    return bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else None


def _head_size_from_file(config: Any, reader: Any) -> None:
    """Set ``config.head_dim`` from the file's ``<arch>.attention.key_length`` where it has one
    (transformers' Qwen3 GGUF mapping reads no head size and keeps the class default, 128,
    right only for the released Qwen3 sizes)."""
    key = reader.fields.get(f"{gguf_architecture(reader)}.attention.key_length")
    if key is not None and hasattr(config, "head_dim"):
        config.head_dim = int(key.parts[key.data[0]][0])


def _name_map(config: Any, architecture: str) -> tuple[dict[str, str], Any, set[str], set[str]]:
    """GGUF tensor name -> transformers parameter name, the tensor processor, expected names,
    and the names of ``nn.Linear`` weights."""
    import torch
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config.to_dict())
    expected = set(skeleton.state_dict())
    linears = {
        f"{name}.weight"
        for name, module in skeleton.named_modules()
        if isinstance(module, torch.nn.Linear)
    }
    if getattr(config, "tie_word_embeddings", False):
        expected.discard("lm_head.weight")
    # One level of gguf's name map covers the common decoder layouts quickly; transformers'
    # recursive search (slow: it rebuilds the map per sub-module) handles the rest.
    arch = next((k for k, v in MODEL_ARCH_NAMES.items() if v == architecture), None)
    mapping: dict[str, str] = {}
    if arch is not None:  # processors that rename tensors fail the check below
        names = get_tensor_name_map(arch, config.num_hidden_layers)
        for hf_name in expected:
            base, _, suffix = hf_name.rpartition(".")
            gguf_name = names.get_name(base)
            if gguf_name is not None:
                mapping[f"{gguf_name}.{suffix}"] = hf_name
    if not expected <= set(mapping.values()):
        mapping = get_gguf_hf_weights_map(skeleton, processor)
    return mapping, processor, expected, linears


def _quantized_linears(
    reader: Any, mapping: dict[str, str], processor: Any, linears: set[str]
) -> dict[str, tuple[str, Any]]:
    """GGUF name -> (kernel kind, row order) of every linear weight that can stay in its GGUF
    integers: a type of :data:`QUANT_TYPES`, of a shape the kernels take, and either copied
    as it is by transformers' GGUF processor for this architecture or only reordered by rows
    (Llama's ``attn_q``/``attn_k``, stored permuted for llama.cpp's rotary layout): the row
    order is None for the first, else the output rows to take, in order (:func:`_row_order`)."""
    from adapld_cli.model import quant

    out = {}
    for tensor in reader.tensors:
        kind = QUANT_TYPES.get(tensor.tensor_type.name)
        if kind and mapping.get(tensor.name) in linears:
            k, n = (int(x) for x in tensor.shape[:2])  # GGUF shapes are [in, out]
            if len(tensor.shape) == 2 and quant.fits(kind, n, k):
                order = _row_order(processor, tensor.name, n, mapping)
                if order is not False:
                    out[tensor.name] = (kind, order)
    return out


def _row_order(processor: Any, name: str, n: int, mapping: dict[str, str]) -> Any:
    """What transformers' GGUF ``processor`` does to the ``n`` output rows of tensor ``name``,
    found by running it on the row numbers: None (nothing), the row order it applies (an
    int64 array: row ``i`` of the result is row ``order[i]`` of the file), or False (anything
    else: values changed, rows merged or renamed; that tensor is dequantised instead)."""
    import numpy as np

    probe = np.arange(n, dtype=np.float64).reshape(n, 1)
    try:
        result = processor.process(
            weights=probe.copy(), name=name, tensor_key_mapping=mapping, parsed_parameters={}
        )
    except Exception:  # a processor that cannot take the probe: do not guess
        return False
    rows = getattr(result, "weights", None)
    if getattr(result, "name", None) != name or rows is None or np.shape(rows) != (n, 1):
        return False
    rows = np.asarray(rows)[:, 0]
    if not np.array_equal(np.sort(rows), probe[:, 0]):
        return False
    order = rows.astype(np.int64)
    return None if np.array_equal(order, np.arange(n)) else order


def _write_quantized(
    reader: Any,
    names: dict[str, tuple[str, Any]],
    mapping: dict[str, str],
    out: Path,
    advance: Callable[[int], None],
) -> None:
    """The packed integer parts of the linears ``names`` (kind, row order) into
    ``out``/:data:`QUANT`; its metadata maps each module to its kind. A weight's rows are
    reordered as whole rows of GGUF blocks (a row is ``k / 256`` blocks), so every value is
    the file's."""
    from adapld_cli.model import quant

    writer = StreamWriter(out / QUANT, 3 * len(names))
    kinds: dict[str, str] = {}
    try:
        for tensor in reader.tensors:
            if tensor.name not in names:
                continue
            kind, order = names[tensor.name]
            k, n = (int(x) for x in tensor.shape[:2])
            blocks = tensor.data if order is None else tensor.data.reshape(n, -1)[order]
            kind, parts = quant.gguf_parts(tensor.tensor_type.name, blocks, n, k)
            module = mapping[tensor.name].removesuffix(".weight")
            for key, value in quant.pack(kind, parts).items():
                writer.add(f"{module}.{key}", value)
            kinds[module] = kind
            advance(int(tensor.n_bytes))
        writer.close({"kinds": json.dumps(kinds, sort_keys=True)})
    except BaseException:
        writer.abort()
        raise


def _write_weights(
    gguf: Path, reader: Any, out: Path, config: Any, progress: bool, quantized: bool
) -> None:
    """Dequantise tensor by tensor straight into ``out``/model.safetensors (see module doc);
    with ``quantized``, linears that the CPU kernels run from their GGUF integers go to
    ``out``/:data:`QUANT` instead, packed."""
    import numpy as np
    import torch

    architecture = gguf_architecture(reader) or ""
    mapping, processor, expected, linears = _name_map(config, architecture)
    embed = _packable_embedding(reader, mapping, config)
    kept = {}
    if quantized and architecture in KERNEL_ARCHS:
        kept = _quantized_linears(reader, mapping, processor, linears)
    order = sorted(
        (t for t in reader.tensors if t.name != embed and t.name not in kept),
        key=lambda t: -_storage_dtype(t.tensor_type).itemsize,
    )
    parsed: dict[str, Any] = {"config": config.to_dict(), "tensors": {}}
    written: set[str] = set()
    total = sum(int(t.n_bytes) for t in reader.tensors)
    with step(progress, "Converting the model (one time)", total=total) as advance:
        writer = StreamWriter(out / WEIGHTS, len(order))
        try:
            for tensor, weights in _dequantized(order):
                result = processor.process(
                    weights=weights,
                    name=tensor.name,
                    tensor_key_mapping=mapping,
                    parsed_parameters=parsed,
                )
                if result.name in mapping and result.weights is not None:
                    array = np.ascontiguousarray(result.weights)
                    if not array.flags.writeable:  # a view of the mapped file
                        array = array.copy()
                    data = torch.from_numpy(array)
                    writer.add(mapping[result.name], data.to(_storage_dtype(tensor.tensor_type)))
                    written.add(mapping[result.name])
                advance(int(tensor.n_bytes))
                del weights, result
            for name, data in parsed["tensors"].items():  # processors that merge tensors
                writer.add(name, data.to(torch.bfloat16))
                written.add(name)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        if embed is not None:
            _write_packed(reader, embed, mapping[embed], out)
            written.add(mapping[embed])
            advance(int(next(t.n_bytes for t in reader.tensors if t.name == embed)))
        if kept:
            _write_quantized(reader, kept, mapping, out, advance)
            written.update(mapping[name] for name in kept)
    missing = sorted(expected - written)
    if missing:
        raise ModelError(f"GGUF file {gguf.name} lacks weights for {', '.join(missing[:3])}")


def _dequantized(tensors: list[Any]) -> Iterator[tuple[Any, Any]]:
    """(tensor, float32 array) in order; up to two tensors dequantised at once in threads
    (numpy releases the GIL), so memory holds at most three dequantised tensors."""
    from concurrent.futures import ThreadPoolExecutor

    from gguf import dequantize

    workers = max(1, min(2, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[tuple[Any, Any]] = deque()
        for tensor in tensors:
            pending.append((tensor, pool.submit(dequantize, tensor.data, tensor.tensor_type)))
            if len(pending) > workers:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()


def _packable_embedding(reader: Any, mapping: dict[str, str], config: Any) -> str | None:
    """The GGUF name of the input embedding if it can stay quantised on disk, else None.

    It can when it is quantised and not tied to the output layer: it is only ever indexed, so
    keeping its GGUF blocks (a quarter of the bfloat16 size) and dequantising them at load
    (:func:`restore_packed`) gives the same numbers for less disk.
    """
    if getattr(config, "tie_word_embeddings", False):
        return None
    for tensor in reader.tensors:
        if mapping.get(tensor.name, "").endswith("embed_tokens.weight"):
            return tensor.name if _is_quantized(tensor.tensor_type) else None
    return None


def _write_packed(reader: Any, gguf_name: str, hf_name: str, out: Path) -> None:
    import torch

    tensor = next(t for t in reader.tensors if t.name == gguf_name)
    rows = [int(n) for n in reversed(tensor.shape.tolist())]
    writer = StreamWriter(out / PACKED, 1)
    try:
        writer.add(hf_name, torch.from_numpy(tensor.data.copy()))
        writer.close(
            {"ggml_type": str(int(tensor.tensor_type)), "shape": json.dumps(rows), "of": hf_name}
        )
    except BaseException:
        writer.abort()
        raise


def restore_packed(model: Any, folder: Path | str) -> bool:
    """Put the embedding kept in GGUF blocks into ``model``; False if there is none.

    After ``from_pretrained`` (which leaves that parameter freshly initialised) the table is
    dequantised into it, cast to its dtype on its device. On a model built on empty weights
    (``loader._load_quantized``: the parameter is on the meta device) the embedding module
    becomes a ``PackedEmbedding`` (:func:`packed_embedding_class`) over the blocks instead:
    the same values, row by row as they are looked up (no dequantisation of the whole table
    per load, and the blocks in memory instead of the table: docs/design.md, "Numerical facts
    the tests rely on").
    """
    path = Path(folder) / PACKED
    if not path.is_file():
        return False
    import torch
    from gguf import GGMLQuantizationType, dequantize
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as fh:
        meta = fh.metadata()
        raw = fh.get_tensor(meta["of"])
    kind = GGMLQuantizationType(int(meta["ggml_type"]))
    shape = json.loads(meta["shape"])
    param = model.get_parameter(meta["of"])
    if param.is_meta:
        owner = meta["of"].rpartition(".")[0]
        parent, _, child = owner.rpartition(".")
        blocks = raw.reshape(shape[0], -1)  # [rows, bytes per row]
        module = packed_embedding_class()(blocks, kind, shape[1], param.dtype)
        setattr(model.get_submodule(parent) if parent else model, child, module)
        return True
    weights = dequantize(raw, kind).reshape(shape)
    with torch.no_grad():
        param.copy_(torch.from_numpy(weights))
    return True


_EMBEDDING: type | None = None


def packed_embedding_class() -> type:
    """The ``PackedEmbedding`` module class (defined on first use: keeps torch out of imports).

    An embedding table kept as GGUF blocks: ``ids [...] -> [..., dim]`` in ``dtype``, each
    row the very values ``gguf`` gives dequantising the whole table (blocks are dequantised
    on their own, then cast once)."""
    global _EMBEDDING
    if _EMBEDDING is not None:
        return _EMBEDDING
    import torch

    class PackedEmbedding(torch.nn.Module):
        def __init__(self, blocks: Any, kind: Any, dim: int, dtype: Any) -> None:
            super().__init__()
            self.blocks, self.kind, self.embedding_dim, self.dtype = blocks, kind, dim, dtype
            self.num_embeddings = blocks.shape[0]  # blocks: numpy uint8 [rows, bytes per row]

        def forward(self, ids: Any) -> Any:
            from gguf import dequantize

            rows = self.blocks[ids.reshape(-1).cpu().numpy()]
            values = dequantize(rows, self.kind).reshape(-1, self.embedding_dim)
            out = torch.from_numpy(values).to(self.dtype)
            return out.reshape(*ids.shape, self.embedding_dim)

        def extra_repr(self) -> str:
            return f"{self.num_embeddings}, {self.embedding_dim}, {self.kind.name} blocks"

    _EMBEDDING = PackedEmbedding
    return _EMBEDDING


def _write_cache(gguf: Path, out: Path, progress: bool, quantized: bool) -> None:
    """Config, tokenizer, generation config and weights of ``gguf`` into the folder ``out``."""
    from transformers import GenerationConfig

    with _one_reader(gguf) as reader:
        config, tokenizer = _config_and_tokenizer(gguf)
        _head_size_from_file(config, reader)
        config.dtype = "bfloat16"
        _write_weights(gguf, reader, out, config, progress, quantized)
    config.save_pretrained(out)
    _save_tokenizer(tokenizer, out)
    generation = GenerationConfig.from_model_config(config)
    if tokenizer.eos_token_id is not None and generation.eos_token_id is None:
        generation.eos_token_id = tokenizer.eos_token_id
    generation.save_pretrained(out)


def _save_tokenizer(tokenizer: Any, out: Path) -> None:
    """``tokenizer.save_pretrained(out)`` with its added tokens in ``tokenizer_config.json``
    (``added_tokens_decoder``, as the model's own repositories have it). transformers 5 leaves
    them out of a tokenizer made from a GGUF, and then every load parses the whole
    ``tokenizer.json`` in Python to find them, a large part of the tokenizer's load time
    (docs/performance.md, "Figures behind code decisions")."""
    tokenizer.save_pretrained(out)
    path = Path(out) / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    if "added_tokens_decoder" not in settings:
        fields = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        settings["added_tokens_decoder"] = {
            str(i): {f: getattr(token, f) for f in fields}
            for i, token in sorted(tokenizer.added_tokens_decoder.items())
        }
        text = json.dumps(settings, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")


def convert_gguf(
    gguf: Path | Callable[[], Path],
    target: Path,
    *,
    source_id: str,
    name: str,
    extra: dict[str, Any] | None = None,
    progress: bool = False,
    after: Callable[[], None] | None = None,
    quantized: bool = False,
) -> Path:
    """Make ``target`` a ready safetensors cache of ``gguf``; return ``target``.

    ``quantized``: keep the linears the CPU kernels can run in their GGUF integers
    (:data:`QUANT`; loaded by ``loader.load`` with ``weights="quantized"``).

    ``gguf`` may be a callable producing the file (e.g. assembling it), so that step also runs
    under the lock and only when the cache is not ready. ``after`` runs once the cache is in
    place (e.g. deleting an assembled GGUF).
    """
    from importlib.metadata import version

    from filelock import FileLock

    target = Path(target)
    if cache_state(target, source_id) == "ready":  # fast path, also for read-only caches
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if cache_state(target, source_id) == "ready":
            return target
        for stale in target.parent.glob(f".{target.name}.*.tmp"):  # left by a killed writer
            shutil.rmtree(stale, ignore_errors=True)
        path = gguf() if callable(gguf) else Path(gguf)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
        try:
            try:
                _write_cache(path, tmp, progress, quantized)
            except (OSError, ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ModelError(f"cannot load GGUF file {path}: {reason}") from exc
            manifest = {
                "format": FORMAT,
                "name": name,
                "source": source_id,
                "gguf": str(path),
                "transformers": version("transformers"),
                "torch": version("torch"),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "files": sorted(p.name for p in tmp.iterdir() if p.is_file()),
                "weights": "quantized" if quantized else "dequantized",
                **(extra or {}),
            }
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the cache is not secret
            for file in tmp.iterdir():
                file.chmod(0o666 & ~umask)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if after is not None:
            after()
    return target
