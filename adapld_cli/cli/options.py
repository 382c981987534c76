"""Options shared by several commands, defined once: model, placement, dtype, weights,
threads.

Each is an ``Annotated`` type for a Typer parameter; commands use them as
``model: ModelOpt = None``. Help texts and defaults live only here.
"""

from __future__ import annotations

from typing import Annotated

import typer

MODEL_PANEL = "Model"

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="NAME|PATH",
        help="An embedded model name (see `adapld model info`), a local model folder, a .gguf "
        "file or a hub id already in the cache. Default: $ADAPLD_MODEL, else the embedded "
        "default.",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]

DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="DEVICE",
        help="cpu, cuda, cuda:N, mps or auto. Default: the best available.",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]

DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype",
        metavar="DTYPE",
        help="auto, float32, bfloat16, float16 or float64. auto: bfloat16 on CUDA; on a CPU "
        "the fastest exact setting (docs/models.md).",
        rich_help_panel=MODEL_PANEL,
    ),
]

WeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        metavar="MODE",
        help="auto, quantized or dequantized. quantized: run a GGUF's 4/6-bit weights as they "
        "are, on adapld's CPU kernels (bfloat16; AVX-512 BF16 or AVX2); dequantized: expand "
        "them to --dtype. auto: quantized wherever it runs (docs/models.md). Default: "
        "$ADAPLD_WEIGHTS, else auto.",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]

ThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--threads",
        min=1,
        metavar="N",
        help="torch CPU threads. Default: the machine's physical cores.",
        rich_help_panel=MODEL_PANEL,
        show_default=False,
    ),
]
