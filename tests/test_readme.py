"""The README's Python examples run, in order, in one fresh interpreter, and answer right.

The examples are run as written; only the DP noise is seeded (a prelude seeds
numpy's ``default_rng()``, which every mechanism draws its OS-entropy generator
from), so the asserted answers are the same on every run. The settings, not the
seed, make them right: the tests of ``examples/`` measure the same settings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from dprag_core.eval.metrics import match
from dprag_core.eval.synthetic import make_corpus

ROOT = Path(__file__).resolve().parents[1]
SEEDED = """\
import itertools
import numpy as np

_default_rng, _seeds = np.random.default_rng, itertools.count()
np.random.default_rng = lambda seed=None: _default_rng(next(_seeds) if seed is None else seed)
"""


def readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def run(blocks: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    script = folder / "readme_examples.py"
    script.write_text("\n\n".join([SEEDED, *blocks]), encoding="utf-8")
    # this checkout's packages first (not whichever one the virtualenv installed)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_readme_has_examples() -> None:
    assert len(readme_blocks()) >= 3


def test_readme_examples_answer_right_and_a_rerun_names_the_budget(tmp_path: Path) -> None:
    done = run(readme_blocks(), tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    gold = make_corpus(n_diseases=4, max_support=16, seed=0).questions_of("treatment")[0]
    assert gold.support == 16
    lines = done.stdout.splitlines()
    quick = [re.fullmatch(r"(.*) \| the records say: (\w+)", line) for line in lines]
    (first,) = [m for m in quick if m]
    assert first.group(2) == gold.answer and match(first.group(1), gold.answer), done.stdout
    # the quick start's, the LangChain chains' (word-level DPVote, DPAnswerVote, MuRAG),
    # LlamaIndex's
    answered = [line for line in lines if match(line.split(" | ")[0], gold.answer)]
    assert len(answered) == 5, done.stdout
    assert any(line.endswith(" documents") for line in answered), done.stdout
    assert "no answer released" not in done.stdout
    assert "refused before retrieval" in done.stdout
    # the quick start again in the same folder: its budget is spent, and the refusal
    # says where it is kept and how to look at it
    again = run(readme_blocks()[:1], tmp_path)
    assert again.returncode != 0
    refusal = again.stderr.strip().splitlines()[-1]
    assert "PrivacyBudgetExhausted" in refusal and "persists" in refusal, refusal
    budget = str(tmp_path / "budget.db")
    assert f"see it: dprag ledger status --sqlite {budget} --table corpus" in refusal, refusal
