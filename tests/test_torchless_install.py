"""An existing app's install: ``dprag[langchain-openai,llamaindex-openai]`` in a fresh venv
without torch answers a DP query through each framework, against a served model.

The venv is built from this checkout (``python -m venv --without-pip``, no system
site packages: the test venv has torch, the built one must not), and this
interpreter's pip installs into it (``pip --python``), reusing pip's cache. The
first python block of docs/langchain.md and of docs/llamaindex.md (the served-model
quick starts, skipped by tests/test_docs_run.py for want of a server) then run in it,
as written, with ``OPENAI_BASE_URL`` / ``OPENAI_API_BASE`` pointing at a stand-in
OpenAI-compatible server process (tests/openai_stub.py) that answers every voter
"Damorin." as a model reading the records would. ``import torch`` must fail there.

Building the venv takes minutes on a cold pip cache: ``python tests/test_torchless_install.py``
prints the time each step takes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docs_run import ROOT, blocks
from openai_stub import stub_server

EXTRAS = "langchain-openai,llamaindex-openai"
PACKAGES = ("dprag_core", "langchain_dprag", "llamaindex_dprag")
MARK = "tests/test_torchless_install.py"


def quick_start(doc: str) -> str:
    """The code of ``doc``'s served-model quick start (the block this test runs)."""
    [block] = [b for b in blocks(ROOT / "docs" / doc) if b.skip and MARK in b.skip]
    return block.code


def build_venv(where: Path) -> tuple[Path, dict[str, float]]:
    """A torch-less venv with dprag and both frameworks' OpenAI-style clients; step times."""
    source = where / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in PACKAGES:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    times = {}
    start = time.perf_counter()
    venv = where / "venv"
    # no pip of its own (ensurepip is a third of a warm build): this interpreter's pip
    # installs into it (--python), with pip's cache
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    times["venv"] = time.perf_counter() - start
    python = venv / "bin" / "python"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
         "--disable-pip-version-check", f"{source}[{EXTRAS}]"],
        check=True,
    )  # fmt: skip
    times["pip install"] = time.perf_counter() - start
    return python, times


def run_in(python: Path, code: str, url: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": str(python.parent),
        "HOME": str(folder),
        "OPENAI_BASE_URL": url,
        "OPENAI_API_BASE": url,
        "OPENAI_API_KEY": "none",
        "XDG_DATA_HOME": str(folder / "data"),
    }
    return subprocess.run(
        [str(python), "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_torchless_venv_answers_through_each_framework(tmp_path: Path) -> None:
    python, _ = build_venv(tmp_path)
    no_torch = run_in(python, "import torch", "http://127.0.0.1:9/v1", tmp_path)
    assert "No module named 'torch'" in no_torch.stderr
    with stub_server(default="Damorin.") as url:
        for doc in ("langchain.md", "llamaindex.md"):
            done = run_in(python, quick_start(doc), url, tmp_path)
            assert done.returncode == 0, (doc, done.stderr[-3000:])
            assert "Damorin" in done.stdout and "epsilon" in done.stdout, (doc, done.stdout)


if __name__ == "__main__":  # measure: python tests/test_torchless_install.py
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        _, steps = build_venv(Path(folder))
    print(", ".join(f"{step}: {seconds:.1f} s" for step, seconds in steps.items()))
