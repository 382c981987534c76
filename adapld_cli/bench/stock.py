"""The stock model the transformers baselines (``hf``, ``hf-pld``) run on.

Those baselines measure what a user gets without adapld, so they must run on the model exactly
as a user would load it: ``AutoModelForCausalLM.from_pretrained(folder, dtype=..., device_map=
...)`` on the folder adapld loaded from, in the same dtype and on the same device (a user
wanting that precision passes that ``dtype``), no kernel changes. adapld's own loading may
change its model for speed (prepacked CPU weights and the like), so :class:`StockModel` checks:

- when adapld's model is still stock (:func:`is_stock`: every module a torch.nn or
  transformers class, no forward replaced on an instance, plain dense parameters), the
  baselines share it: nothing else is loaded;
- otherwise a separate stock copy is loaded once, on first use, with the call above. It costs a
  second copy of the weights in memory, which then shows in every method's peak RSS.

:meth:`StockModel.describe` says which of the two happened (for the report's ``meta``).
"""

from __future__ import annotations

from typing import Any

_STOCK_PACKAGES = ("torch.nn.", "transformers.", "transformers_modules.")  # + remote code


def is_stock(model: Any) -> bool:
    """Whether ``model`` runs transformers' and torch's own code with plain weights."""
    import torch

    for module in model.modules():
        if not type(module).__module__.startswith(_STOCK_PACKAGES):
            return False  # a replacement module class (prepacked linear, compiled wrapper)
        if "forward" in vars(module) and not hasattr(module, "_hf_hook"):
            return False  # forward patched on the instance (accelerate's own hooks excepted)
    return all(p.layout == torch.strided for p in model.parameters())


def _device_map(device: str) -> Any:
    """``device_map`` reproducing a :class:`~adapld_cli.model.LoadedModel` device label."""
    return "auto" if device.startswith("auto") else {"": device}


def load_stock(path: str, dtype: str, device: str) -> Any:
    """The model in ``path`` as a user loads it with transformers (local files only)."""
    import torch
    from transformers import AutoModelForCausalLM

    from adapld_cli.model.convert import restore_packed
    from adapld_cli.model.loader import quiet

    with quiet(verbose=False):
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=getattr(torch, dtype),
            device_map=_device_map(device),
            local_files_only=True,
        )
    # An embedded model's cache keeps the input embedding in GGUF blocks (see
    # adapld_cli.model.convert); put it back, as the original checkpoint would have it.
    restore_packed(model, path)
    return model.eval()


class StockModel:
    """Hands the baselines a stock model: adapld's when it is stock, else a copy (see above).

    ``loaded`` is anything with ``model``, ``path``, ``dtype`` and ``device`` (a
    :class:`~adapld_cli.model.LoadedModel`). :meth:`get` checks on every call, so a model
    changed after loading is noticed too.
    """

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.copy: Any = None
        self.shared: bool | None = None  # None: not asked yet

    def get(self) -> Any:
        if self.copy is None and is_stock(self.loaded.model):
            self.shared = True
            return self.loaded.model
        if self.copy is None:
            loaded = self.loaded
            self.copy = load_stock(str(loaded.path), loaded.dtype, str(loaded.device))
        self.shared = False
        return self.copy

    def describe(self) -> str | None:
        """One line for the report's ``meta`` (None when no baseline ran)."""
        if self.shared is None:
            return None
        if self.shared:
            return "adapld's loaded model (it is stock: shared)"
        return f"stock copy: AutoModelForCausalLM.from_pretrained({self.loaded.path!s})"
