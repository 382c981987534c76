"""adapld: edit source files with a local language model, fast and losslessly (AdaPLD)."""

import os

__version__ = "0.1.0"

# oneDNN's AMX kernels (bfloat16 products on CPUs with AMX tiles) round a row differently
# depending on how many rows share the product, so a prefill chunk or a draft tree would not
# compute what single steps do; its AVX-512 kernels do (docs/design.md, "Numerical facts the
# tests rely on"). oneDNN reads this once, at the process's first product, so it is set on
# import, before any; a value the user set is kept. No effect on CPUs without AMX.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
