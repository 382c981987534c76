"""Resolve a model spec, prepare its files once, load it onto the chosen device.

Contract:
- :func:`resolve_spec`: ``--model`` value, else ``$ADAPLD_MODEL``, else the default embedded
  model's name (``coder-1.5b``).
- :func:`classify`: an embedded model's name (``coder-1.5b``, ``coder-0.5b``; ``embedded`` is the
  default one) is ``"embedded"``; a reference to another tool's store (``ollama:NAME[:TAG]``,
  ``lmstudio:PUBLISHER/REPO``, ``ORG/NAME:QUANT`` in the Hugging Face cache:
  :mod:`adapld_cli.model.stores`) and an existing ``.gguf`` file (or a folder holding exactly one
  ``.gguf`` and no ``config.json``) is ``"gguf"``; an existing folder is ``"local"``; anything
  else that does not look like a path is a Hugging Face hub id (``"hub"``).
- :func:`prepare`: the one-time work (embedded: assemble + verify + convert, then remove the
  caches of embedded models or cache formats no longer shipped; gguf: convert; hub: download
  unless cached; local: nothing) and returns the folder to load from.
- :func:`load`: prepare, then ``from_pretrained`` model and tokenizer from the same folder with
  accelerate placement, in eval mode. Hub ids are tried from the local HF cache first.
- what load would do, without loading weights: :mod:`adapld_cli.model.info`.
Everything the user can fix raises :class:`ModelError` (one line).
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapld_cli.model import fused, kernels, lean, stores
from adapld_cli.model.assemble import (
    assemble,
    locate_embedded_parts,
    reinstall_hint,
)
from adapld_cli.model.clean import in_use, remove_obsolete
from adapld_cli.model.convert import QUANT, WEIGHTS, cache_state, convert_gguf, restore_packed
from adapld_cli.model.errors import ModelError
from adapld_cli.model.paths import (
    DEFAULT_EMBEDDED,
    EMBEDDED_MODELS,
    ENV_MODEL,
    EmbeddedModel,
    cache_dir,
    models_dir,
)
from adapld_cli.model.placement import Placement, resolve_placement, tune_attention
from adapld_cli.model.progress import want_progress

EMBEDDED = "embedded"
ENV_WEIGHTS = "ADAPLD_WEIGHTS"
WEIGHT_MODES = ("auto", "quantized", "dequantized")
QUANTIZED_SUFFIX = "-quantized"  # cache folder of a model whose linears stay in GGUF integers


@dataclass
class LoadedModel:
    """What :func:`load` returns: a model ready for the engine, in eval mode, with the tokenizer
    from the same source.

    ``source`` is one of ``"embedded"``, ``"hub"``, ``"local"``, ``"gguf"``; ``path`` is the
    folder the weights were loaded from (for embedded/gguf: the converted safetensors cache);
    ``device`` is where the weights live (``"cpu"``, ``"cuda:0"``, or ``"auto (cuda:0, cuda:1)"``
    when accelerate spread them); ``dtype`` is the torch dtype name (``"float32"``) of the
    activations; ``weights`` says whether the linears run from the GGUF's own 4/6-bit integers
    (``"quantized"``) or from weights dequantised to ``dtype``; ``activations`` how quantized
    linears take their inputs (``"int8"`` or ``"bfloat16"``, see
    :func:`adapld_cli.model.quant.resolve_activations`).
    """

    model: Any
    tokenizer: Any
    name: str
    source: str
    path: str
    device: str
    dtype: str
    weights: str = "dequantized"  # or "quantized": linears on the 4/6-bit kernels
    activations: str = ""  # quantized: how the linears take their inputs, "int8" or "bfloat16"

    def weights_label(self) -> str:
        """What the linears compute with, for one-line descriptions."""
        if self.weights == "quantized":
            return f"4-bit weights, {self.activations} activations"
        return f"{self.weights} weights"


@dataclass(frozen=True)
class Target:
    """A classified model spec."""

    kind: str  # "embedded" | "hub" | "local" | "gguf"
    spec: str
    name: str
    path: Path | None = None  # the folder or .gguf file for local/gguf
    embedded: EmbeddedModel | None = None


def resolve_spec(spec: str | None) -> str:
    """The model to use: the option value, else ``$ADAPLD_MODEL``, else ``coder-1.5b``."""
    for value in (spec, os.environ.get(ENV_MODEL)):
        if value and value.strip():
            return value.strip()
    return DEFAULT_EMBEDDED


def embedded_model(spec: str) -> EmbeddedModel | None:
    """The embedded model a spec names (``embedded`` = the default one), else None."""
    name = spec.strip().lower()
    if name == EMBEDDED:
        name = DEFAULT_EMBEDDED
    return EMBEDDED_MODELS.get(name)


def _offline() -> bool:
    return any(
        os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _offline_error(spec: str) -> ModelError:
    return ModelError(
        f"cannot download model {spec} (offline?) — pass a local folder or .gguf with "
        f"--model / {ENV_MODEL}"
    )


def classify(spec: str | None) -> Target:
    """Decide what kind of model ``spec`` names (see the module contract)."""
    spec = resolve_spec(spec)
    known = embedded_model(spec)
    if known is not None:
        return Target(EMBEDDED, spec, known.name, embedded=known)
    stored = stores.find(spec)  # ollama:NAME, lmstudio:PUB/REPO, ORG/NAME:QUANT (HF cache)
    if stored is not None:
        return Target("gguf", spec, spec, stored.resolve())
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"--model {spec}: a file must be a .gguf checkpoint")
        return Target("gguf", spec, path.name, path.resolve())
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file():
            if len(ggufs) == 1:
                return Target("gguf", spec, ggufs[0].name, ggufs[0].resolve())
            what = f"{len(ggufs)} .gguf files" if ggufs else "no config.json"
            raise ModelError(f"--model {spec}: not a model folder ({what})")
        return Target("local", spec, path.resolve().name, path.resolve())
    looks_like_path = (
        spec.startswith((".", "/", "~", "\\"))
        or spec.lower().endswith(".gguf")
        or spec.count("/") > 1
        or (os.sep != "/" and os.sep in spec)
    )
    if looks_like_path:
        raise ModelError(f"--model {spec}: no such file or folder")
    if spec.lower().startswith("coder-"):
        names = ", ".join(EMBEDDED_MODELS)
        raise ModelError(f"--model {spec}: no such embedded model (there are: {names})")
    return Target("hub", spec, spec)


# ----------------------------------------------------------------------------- preparation


def _embedded_target(model: EmbeddedModel, quantized: bool = False) -> Path:
    return models_dir() / (model.key + (QUANTIZED_SUFFIX if quantized else ""))


def _embedded_gguf(model: EmbeddedModel) -> Path:
    return cache_dir() / "embedded" / model.gguf


def embedded_source_id(model: EmbeddedModel) -> str:
    """The ``source`` an embedded model's cache manifest records: its GGUF's sha256."""
    return f"embedded:{model.sha256}"


def _prepare_embedded(model: EmbeddedModel, progress: bool, quantized: bool) -> Path:
    def make_gguf() -> Path:
        return assemble(
            locate_embedded_parts(model),
            _embedded_gguf(model),
            size=model.size,
            sha256=model.sha256,
            hint=reinstall_hint(model),
            progress=progress,
        )

    def tidy() -> None:
        # The safetensors cache is all we load from; the parts stay installed, so the GGUF can
        # be re-assembled if the cache is ever rebuilt. Caches of models or cache formats no
        # longer shipped go too.
        _embedded_gguf(model).unlink(missing_ok=True)
        remove_obsolete(models_dir(), _current_embedded(), only_embedded=True)

    return convert_gguf(
        make_gguf,
        _embedded_target(model, quantized),
        source_id=embedded_source_id(model),
        name=model.title,
        extra={"embedded": model.name, "source_sha256": model.sha256, "source_size": model.size},
        progress=progress,
        after=tidy,
        quantized=quantized,
    )


def clean(dry_run: bool = False) -> list[tuple[Path, int]]:
    """Remove caches nothing will load again (see :mod:`adapld_cli.model.clean`) and assembled
    GGUFs left by an interrupted prepare; return what was (or would be) removed, with bytes."""
    removed = remove_obsolete(models_dir(), _current_embedded(), dry_run=dry_run)
    folder = cache_dir() / "embedded"
    if folder.is_dir():
        targets = {m.gguf: _embedded_target(m) for m in EMBEDDED_MODELS.values()}  # lock owner
        for entry in sorted(folder.iterdir()):
            name = entry.name.split(".tmp")[0].lstrip(".").rsplit(".gguf", 1)[0] + ".gguf"
            target = targets.get(name)
            current_lock = target is not None and entry.name == f"{name}.lock"
            if entry.is_file() and not current_lock and (target is None or not in_use(target)):
                removed.append((entry, entry.stat().st_size))
                if not dry_run:
                    entry.unlink(missing_ok=True)
    return removed


def _current_embedded() -> dict[str, str]:
    """Cache folder name -> source id of every embedded model this version ships (both the
    dequantised and the quantized cache)."""
    out = {}
    for m in EMBEDDED_MODELS.values():
        for quantized in (False, True):
            out[_embedded_target(m, quantized).name] = embedded_source_id(m)
    return out


def _gguf_key(path: Path) -> tuple[str, str]:
    """Cache folder name and source id for a user GGUF: keyed by path, size and mtime."""
    st = path.stat()
    source_id = f"gguf:{path}:{st.st_size}:{st.st_mtime_ns}"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-")[:60] or "model"
    return f"gguf-{slug}-{hashlib.sha256(source_id.encode()).hexdigest()[:12]}", source_id


def _cache_for(target: Target, quantized: bool = False) -> tuple[Path, str]:
    """Converted-cache folder and source id of an embedded or gguf target."""
    if target.embedded is not None:
        return _embedded_target(target.embedded, quantized), embedded_source_id(target.embedded)
    assert target.path is not None
    key, source_id = _gguf_key(target.path)
    return models_dir() / (key + (QUANTIZED_SUFFIX if quantized else "")), source_id


def _prepare_gguf(path: Path, progress: bool, quantized: bool) -> Path:
    folder, source_id = _cache_for(Target("gguf", str(path), path.name, path), quantized)
    return convert_gguf(
        path, folder, source_id=source_id, name=path.name, progress=progress, quantized=quantized
    )


def _quantized_reason(target: Target, placement: Any) -> str | None:
    """Why quantized weights cannot be used for this target and placement, or None."""
    from adapld_cli.model import quant

    if target.kind not in (EMBEDDED, "gguf"):
        return "quantized weights need a GGUF file or an embedded model"
    if placement.device != "cpu":
        return "quantized weights run on a CPU only"
    if placement.dtype != "bfloat16":
        return f"quantized weights compute in bfloat16, not {placement.dtype}"
    if kernels.resolve_mode() == "stock":
        return f"{kernels.ENV_KERNELS}=stock turns adapld's kernels off"
    return quant.unavailable()


def resolve_weights(weights: str | None, target: Target, placement: Any) -> bool:
    """True for quantized weights: ``weights`` (else ``$ADAPLD_WEIGHTS``, else ``auto``).

    ``auto`` takes them wherever they can run (a GGUF or embedded model, on a CPU with AVX-512
    BF16, a C++ compiler and ninja, in bfloat16 with adapld's kernels): faster at every pass
    size and as exact (docs/performance.md, "Figures behind code decisions"). ``quantized``
    where they cannot run, or an unknown value, raises :class:`ModelError`.
    """
    name = (weights or os.environ.get(ENV_WEIGHTS, "") or "auto").strip().lower()
    if name not in WEIGHT_MODES:
        raise ModelError(f"--weights {name}: use one of {', '.join(WEIGHT_MODES)}")
    if name == "dequantized":
        return False
    reason = _quantized_reason(target, placement)
    if reason and name == "quantized":
        raise ModelError(f"--weights quantized: {reason}")
    return reason is None


def _placement(
    target: Target, device: str | None, dtype: str, weights: str | None
) -> tuple[Placement, bool]:
    """``(placement, quantized)`` for a load: :func:`resolve_placement`, then
    :func:`resolve_weights`. An ``auto`` dtype that came out float32 on a CPU (one without
    native bfloat16, such as an AVX2 one) becomes bfloat16 for a GGUF or embedded model where
    that lets the quantized kernels run: they take bfloat16 inputs on either kernel target,
    and the rest of the model stays exact in bfloat16 (:mod:`adapld_cli.model.kernels`)."""
    placement = resolve_placement(device, dtype)
    auto = (dtype or "auto").strip().lower() == "auto"
    cpu32 = placement.device == "cpu" and placement.dtype == "float32"
    if auto and cpu32 and target.kind in (EMBEDDED, "gguf"):
        bf16 = Placement(placement.device_map, placement.device, "bfloat16")
        if resolve_weights(weights, target, bf16):
            return bf16, True
    return placement, resolve_weights(weights, target, placement)


def _hub_cached(spec: str) -> Path | None:
    """The local HF-cache snapshot of a hub model, or None. Never touches the network."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json")
    except Exception:  # invalid repo id and the like
        return None
    return Path(found).parent if isinstance(found, str) else None


def _prepare_hub(spec: str) -> Path:
    cached = _hub_cached(spec)
    if cached is not None:
        return cached
    if _offline():
        raise _offline_error(spec)
    try:
        from huggingface_hub import snapshot_download

        # What from_pretrained reads; skips .bin/.onnx/.gguf duplicates some repos carry.
        patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
        return Path(snapshot_download(spec, allow_patterns=patterns))
    except Exception as exc:
        raise _hub_error(spec, exc) from exc


def _hub_error(spec: str, exc: BaseException) -> ModelError:
    text = f"{type(exc).__name__}: {exc}"
    if re.search(r"RepositoryNotFound|not a valid model identifier|404", text):
        return ModelError(
            f"no model {spec} on the Hugging Face hub — pass a hub id, a local folder or "
            f"a .gguf with --model / {ENV_MODEL}"
        )
    return _offline_error(spec)


def prepare(
    spec: str | None = None,
    progress: bool | None = None,
    *,
    verbose: bool = False,
    device: str | None = None,
    dtype: str = "auto",
    weights: str | None = None,
) -> Path:
    """Do the one-time work for ``spec`` now (for the weights :func:`load` would use with the
    same ``device``/``dtype``/``weights``, the kernels built too); return the folder the model
    loads from."""
    target = classify(spec)
    if target.kind == "local":
        assert target.path is not None
        return target.path
    _, quantized = _placement(target, device, dtype, weights)
    show = want_progress(progress)
    if quantized:
        quantized = _build_kernels(weights, show)
    if target.kind in (EMBEDDED, "gguf"):
        folder, source_id = _cache_for(target, quantized)
        if cache_state(folder, source_id) == "ready":  # nothing to do: stay instant
            return folder
    with quiet(verbose):
        return _prepare_folder(target, show, quantized) or _prepare_hub(target.spec)


def _build_kernels(weights: str | None, progress: bool) -> bool:
    """Build the quantized kernels; False (use dequantised weights) if that fails under
    ``auto``; raises :class:`ModelError` if quantized weights were asked for explicitly."""
    from adapld_cli.model import quant

    try:
        quant.extension(progress=progress)
    except RuntimeError as exc:
        if (weights or os.environ.get(ENV_WEIGHTS, "")).strip().lower() == "quantized":
            raise ModelError(f"--weights quantized: {exc}") from exc
        return False
    return True


def _prepare_folder(target: Target, progress: bool, quantized: bool) -> Path | None:
    """The converted cache of an embedded or gguf target (made if needed), else None."""
    if target.embedded is not None:
        return _prepare_embedded(target.embedded, progress, quantized)
    if target.kind == "gguf":
        assert target.path is not None
        return _prepare_gguf(target.path, progress, quantized)
    return None


# ----------------------------------------------------------------------------- loading


@contextmanager
def quiet(verbose: bool) -> Iterator[None]:
    """Silence transformers / hub logging, progress bars and Python warnings unless verbose."""
    if verbose:
        yield
        return
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars

        hub_bars_off = are_progress_bars_disabled()
        disable_progress_bars()
    except ImportError:  # pragma: no cover
        hub_bars_off = True
    # transformers' GGUF de-quantisation uses a bare ``tqdm.auto`` bar that its own switch does
    # not reach; swap in a disabled one for the duration.
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        if not hub_bars_off:
            from huggingface_hub.utils import enable_progress_bars

            enable_progress_bars()


def _device_label(model: Any) -> str:
    placed = getattr(model, "hf_device_map", None) or {}
    devices = sorted({f"cuda:{d}" if isinstance(d, int) else str(d) for d in placed.values()})
    if len(devices) > 1:
        return f"auto ({', '.join(devices)})"
    if devices:
        return devices[0]
    return str(next(model.parameters()).device)


def _from_pretrained(cls: Any, ref: str, *, hub: bool, **kwargs: Any) -> Any:
    """``cls.from_pretrained``; for hub ids the local HF cache first, then the network."""
    if not hub:
        return cls.from_pretrained(ref, local_files_only=True, **kwargs)
    try:
        return cls.from_pretrained(ref, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        if _offline():
            raise _offline_error(ref) from None
    try:
        return cls.from_pretrained(ref, **kwargs)
    except Exception as exc:
        raise _hub_error(ref, exc) from exc


def load(
    spec: str | None = None,
    *,
    device: str | None = None,
    dtype: str = "auto",
    verbose: bool = False,
    progress: bool | None = None,
    weights: str | None = None,
) -> LoadedModel:
    """Load model + tokenizer for ``spec`` (see :func:`resolve_spec`), ready for the engine;
    ``weights``: see :func:`resolve_weights`."""
    target = classify(spec)
    placement, quantized = _placement(target, device, dtype, weights)
    show = want_progress(progress)
    if quantized:
        quantized = _build_kernels(weights, show)
    activations = _activations() if quantized else ""
    with quiet(verbose):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = target.path if target.kind == "local" else _prepare_folder(target, show, quantized)
        ref = str(folder) if folder is not None else target.spec
        hub = folder is None
        try:
            if quantized:
                assert folder is not None
                model = _load_quantized(folder, activations)
            else:
                model = _from_pretrained(
                    AutoModelForCausalLM,
                    ref,
                    hub=hub,
                    dtype=placement.torch_dtype(),
                    device_map=placement.device_map,
                )
            tokenizer = _from_pretrained(AutoTokenizer, ref, hub=hub)
        except ModelError:
            raise
        except (OSError, ValueError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ModelError(f"cannot load model {target.spec}: {reason}") from exc
    if folder is not None and not quantized:  # a quantized cache's was put in by _finish_quantized
        restore_packed(model, folder)
    model.eval()
    device_type = next(model.parameters()).device.type
    tune_attention(device_type)  # CUDA: no cuDNN attention
    fused.fuse(model, device_type)  # CUDA: fewer kernels a layer ($ADAPLD_FUSED=0: stock)
    if kernels.supported(model) is None and kernels.resolve_mode() == "exact":
        _build_kernels("auto", show)  # the native attention (shown on a first build)
    kernels.apply(model)  # prepacked, batch-invariant CPU kernels ($ADAPLD_KERNELS=stock: off)
    lean.install(model)  # on them, the same values with less host work ($ADAPLD_LEAN=0: off)
    path = ref if folder is not None else str(getattr(model, "name_or_path", ref))
    if hub:
        path = str(_hub_cached(target.spec) or path)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=target.name,
        source=target.kind,
        path=path,
        device=_device_label(model),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        weights="quantized" if quantized else "dequantized",
        activations=activations,
    )


def _activations() -> str:
    """The quantized linears' input format (:func:`quant.resolve_activations`)."""
    from adapld_cli.model import quant

    try:
        return quant.resolve_activations()
    except ValueError as exc:
        raise ModelError(str(exc)) from exc


def _load_quantized(folder: Path, activations: str) -> Any:
    """The model of a quantized cache (:data:`QUANT` + the rest in bfloat16) on the CPU, its
    quantized linears taking ``activations`` inputs.

    Built on accelerate's empty weights (no random initialisation of weights about to be
    replaced); every parameter must then come from the cache.
    """
    import json

    import torch
    from accelerate import init_empty_weights
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from adapld_cli.model import quant

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    state = {
        k: v.to(torch.bfloat16) if v.is_floating_point() else v
        for k, v in load_file(folder / WEIGHTS).items()
    }
    model.load_state_dict(state, strict=False, assign=True)
    cls = quant.quant_linear_class()
    if not (folder / QUANT).is_file():  # no linear of this GGUF is Q4_K/Q6_K
        return _finish_quantized(model, folder)
    with safe_open(str(folder / QUANT), framework="pt") as fh:
        for name, kind in json.loads(fh.metadata()["kinds"]).items():
            parent, _, child = name.rpartition(".")
            owner = model.get_submodule(parent)
            old = getattr(owner, child)
            bias = old.bias if old.bias is not None and not old.bias.is_meta else None
            packed = {key: fh.get_tensor(f"{name}.{key}") for key in ("qp", "sc", "dd")}
            if kind == "q8" and activations != "int8":  # q8 takes int8 inputs only
                setattr(owner, child, _dense(quant.unpack_q8(packed), bias))
                continue
            setattr(owner, child, cls(kind, packed, old.in_features, bias, activations))
    return _finish_quantized(model, folder)


def _dense(weight: Any, bias: Any) -> Any:
    """A bfloat16 ``nn.Linear`` of ``weight [out, in]`` (and ``bias``): what a q8 layer
    becomes with bfloat16 activations (the exact kernels then pack it like any linear)."""
    import torch

    out, k = weight.shape
    linear = torch.nn.Linear(k, out, bias=bias is not None, dtype=torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return linear


def _finish_quantized(model: Any, folder: Path) -> Any:
    from transformers import GenerationConfig

    restore_packed(model, folder)
    model.tie_weights()  # a tied LM head follows the embedding assigned above
    empty = [n for n, p in model.named_parameters() if p.is_meta]
    if empty:
        raise ModelError(f"cache {folder} lacks weights for {empty[0]}; run `adapld model clean`")
    model.generation_config = GenerationConfig.from_pretrained(folder, local_files_only=True)
    return model
