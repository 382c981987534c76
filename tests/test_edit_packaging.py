"""Packaging: every sub-package is listed in pyproject, prompts/ ships as a package and the
kernel sources ship as package data."""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # a declared dependency on 3.10 (pyproject.toml)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {
        ".".join(p.relative_to(ROOT).parent.parts)
        for p in (ROOT / "adapld_cli").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert cfg["package-dir"]["adapld_cli.prompts"] == "prompts"


def test_prompts_and_sample_are_resources():
    prompts = importlib.resources.files("adapld_cli.prompts")
    assert (prompts / "default.txt").is_file()
    assert (importlib.resources.files("adapld_cli.data") / "inventory.py").is_file()


def test_the_kernel_sources_ship():
    """qmm.cpp and every header it includes (directly or through another) are package data (a
    wheel builds the kernels from them on the user's machine)."""
    import fnmatch

    from adapld_cli.model import quant

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = cfg["package-data"]["adapld_cli.model"]
    for path in (quant.SOURCE, *quant.HEADERS):
        assert any(fnmatch.fnmatch(path.name, g) for g in globs), path.name
    included, todo = set(), [quant.SOURCE]
    while todo:  # qmm.cpp's own includes and theirs
        for line in todo.pop().read_text().splitlines():
            name = line.split('"')[1] if line.startswith('#include "') else None
            if name and name not in included:
                included.add(name)
                todo.append(quant.SOURCE.with_name(name))
    assert included == {h.name for h in quant.HEADERS}
