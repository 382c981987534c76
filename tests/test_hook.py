"""adapld as a pre-commit hook: a real git repository, the real pre-commit, tiny models.

Each test makes a git repository in a temp dir, writes a ``repo: local`` hook config (the
README's own snippet, or the hook of ``.pre-commit-hooks.yaml`` with ``language: system``),
runs ``pre-commit install`` and commits. ``adapld`` on the hook's PATH is a shim running
``python -m adapld_cli`` with this checkout first on PYTHONPATH; ``PRE_COMMIT_HOME`` is a
temp dir and the hub is offline, so nothing is downloaded. Every commit starts a fresh
adapld process (a few seconds of imports), so the tests keep the number of commits low.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def readme_hook_config() -> dict:
    """The first yaml block of the README's "Pre-commit hook" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Pre-commit hook\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def manifest_hook() -> dict:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    return hook


def local_config(hook: dict) -> dict:
    return {"repos": [{"repo": "local", "hooks": [hook]}]}


class Repo:
    """A git repository in a temp dir with the pre-commit hook installed."""

    def __init__(self, path: Path, env: dict[str, str], config: dict) -> None:
        self.path = path
        self.env = env
        path.mkdir()
        self.git("init", "-q")
        self.git("config", "user.name", "Test")
        self.git("config", "user.email", "test@example.com")
        self.git("config", "commit.gpgsign", "false")
        (path / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.run(sys.executable, "-m", "pre_commit", "install", check=True)

    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, cwd=self.path, env=self.env, capture_output=True, timeout=600)
        out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        proc.out = out.replace("\r\n", "\n")  # type: ignore[attr-defined]
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.out}")  # type: ignore[attr-defined]
        return proc

    def git(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("git", *args, check=True)

    def write(self, name: str, data: str | bytes) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def commit(self, message: str = "change") -> subprocess.CompletedProcess:
        return self.run("git", "commit", "-m", message)

    def head(self) -> str | None:
        proc = self.run("git", "rev-parse", "-q", "--verify", "HEAD")
        return proc.stdout.decode().strip() or None

    def staged(self, name: str) -> bytes:
        return self.run("git", "show", f":{name}", check=True).stdout


def hook_output(out: str) -> str:
    """What the hook printed (after pre-commit's ``- hook id`` / ``- exit code`` lines)."""
    lines = ANSI.sub("", out).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("- hook id: adapld"))
    body = lines[start + 1 :]
    while body and body[0].startswith("- "):
        body = body[1:]
    return "\n".join(body).strip()


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture
def hook_env(tmp_path) -> dict[str, str]:
    return make_hook_env(tmp_path)


def make_hook_env(tmp_path: Path) -> dict[str, str]:
    """Environment for git + pre-commit: ``adapld`` is this checkout, nothing downloads."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "adapld"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m adapld_cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    env = dict(os.environ)  # after conftest's clean-up (no PRE_COMMIT, CI, NO_COLOR, ...)
    env.update(
        PATH=os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]]),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
        HF_HUB_OFFLINE="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "PRE_COMMIT_COLOR", "SKIP"):
        env.pop(var, None)
    return env


def test_manifest_is_valid():
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "adapld"
    assert hook["entry"] == "adapld edit"
    assert hook["language"] == "python"
    assert hook["require_serial"] is True
    assert hook["pass_filenames"] is True
    assert hook["types"] == ["text"]
    assert hook["args"] == []  # the instruction is the user's, in args


def test_readme_config_is_the_recommended_local_hook():
    hook = readme_hook_config()["repos"][0]["hooks"][0]
    assert hook["entry"] == "adapld edit"
    assert hook["language"] == "system"
    assert hook["require_serial"] is True
    assert hook["args"][0] == "-i" and hook["args"][1]


def test_hook_rewrites_blocks_commit_then_passes(hook_env, tiny_models, texts, tmp_path):
    """The README's config as written (model from ADAPLD_MODEL), pre-commit with colour on,
    i.e. the hook gets a pty: adapld must still print plain lines."""
    config = readme_hook_config()
    config["repos"][0]["hooks"][0]["args"] = ["-i", "rename foo to bar"]
    env = {**hook_env, "ADAPLD_MODEL": str(tiny_models["rename"]), "PRE_COMMIT_COLOR": "always"}
    repo = Repo(tmp_path / "repo", env, config)
    calc = repo.write("calc.py", texts.source)
    repo.git("add", "-A")

    first = repo.commit()
    assert first.returncode == 1, first.out
    assert "files were modified by this hook" in first.out
    assert repo.head() is None  # blocked
    assert calc.read_text() == texts.renamed
    assert repo.staged("calc.py").decode() == texts.source  # the index keeps the original
    shown = hook_output(first.out)
    assert "calc.py: edited — renamed foo -> bar" in shown
    raw = first.out.split("- hook id: adapld", 1)[1]
    hook_part = raw.split("files were modified by this hook", 1)[1].split("\n", 1)[1]
    assert "\x1b" not in hook_part, repr(hook_part)  # no colour or cursor codes from adapld

    repo.git("add", "calc.py")
    second = repo.commit()
    assert second.returncode == 0, second.out
    assert "Passed" in second.out
    assert repo.head() is not None
    assert repo.run("git", "show", "HEAD:calc.py").stdout.decode() == texts.renamed


def test_broken_rewrite_left_untouched_and_fails(hook_env, tiny_models, texts, tmp_path):
    hook = readme_hook_config()["repos"][0]["hooks"][0]
    hook["args"] = ["--model", str(tiny_models["broken"]), "-i", "rename foo to bar"]
    repo = Repo(tmp_path / "repo", hook_env, local_config(hook))
    calc = repo.write("calc.py", texts.source)
    repo.git("add", "-A")
    before = snapshot(calc)

    proc = repo.commit()
    assert proc.returncode == 1, proc.out
    assert repo.head() is None
    assert snapshot(calc) == before
    assert "files were modified by this hook" not in proc.out
    assert "- exit code: 1" in proc.out
    shown = hook_output(proc.out)
    assert "calc.py: refused after 2 attempts — the edited file does not parse" in shown
    assert "nothing written" in shown
    assert sorted(p.name for p in repo.path.iterdir()) == [".git", ".pre-commit-config.yaml",
                                                           "calc.py"]  # fmt: skip


def test_check_mode_lists_files_and_writes_nothing(hook_env, tiny_models, texts, tmp_path):
    hook = readme_hook_config()["repos"][0]["hooks"][0]
    hook["args"] = ["--check", "--model", str(tiny_models["rename"]), "-i", "rename foo"]
    repo = Repo(tmp_path / "repo", hook_env, local_config(hook))
    calc = repo.write("calc.py", texts.source)
    repo.git("add", "-A")
    before = snapshot(calc)

    proc = repo.commit()
    assert proc.returncode == 1, proc.out
    assert snapshot(calc) == before
    assert "files were modified by this hook" not in proc.out
    assert "- exit code: 1" in proc.out
    assert "calc.py: would change" in hook_output(proc.out)


def test_many_files_one_model_load_bad_file_reported(hook_env, tiny_models, texts, tmp_path):
    """The shipped manifest's hook (types: [text], require_serial) as a local system hook:
    one adapld process gets every text file; binary files never reach it; a non-UTF-8 file
    is reported and left alone while the others are edited."""
    hook = {**manifest_hook(), "language": "system"}
    hook["args"] = ["--model", str(tiny_models["rename"]), "-i", "rename foo to bar"]
    # the scripted model rewrites any text into calc.py: keep it off the hook config itself
    hook["exclude"] = r"^\.pre-commit-config\.yaml$"
    repo = Repo(tmp_path / "repo", hook_env, local_config(hook))
    good = [repo.write("calc.py", texts.source), repo.write("pkg/calc2.py", texts.source)]
    latin = repo.write("latin.py", b'NAME = "caf\xe9"\n')
    blob = repo.write("data.bin", b"\x00\x01\x02binary\x00")
    repo.git("add", "-A")
    untouched = {p: snapshot(p) for p in (latin, blob)}

    proc = repo.commit()
    assert proc.returncode == 1, proc.out
    assert "files were modified by this hook" in proc.out
    assert "- exit code: 2" in proc.out  # worst result: a file it could not read
    for path in good:
        assert path.read_text() == texts.renamed
    assert {p: snapshot(p) for p in untouched} == untouched
    shown = hook_output(proc.out)
    assert "latin.py: error — not UTF-8 text" in shown
    assert "calc.py: edited" in shown and "pkg/calc2.py: edited" in shown
    assert "data.bin" not in shown  # filtered out by types: [text]
    summaries = [line for line in shown.splitlines() if line.startswith("adapld: ")]
    assert summaries == ["adapld: 3 files: 2 edited, 1 error (exit 2)"]  # one process
