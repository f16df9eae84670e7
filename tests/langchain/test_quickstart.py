"""examples/langchain_quickstart.py, run as documented: every mechanism in order in one folder.

Each command of the example's usage line runs as written, one after the other
in a fresh folder (``tests/docs_run.py``: seeded DP noise, the folder's own
budget directory): every mechanism's answer names the treatment 16 records
support, the example's own budget pays for exactly these runs, no record is
ever printed, and one more query is refused in one line, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_run import ROOT, checkout, documented_commands, run_command

from dprag_core.eval.metrics import match
from dprag_core.eval.synthetic import make_corpus

EXAMPLE = ROOT / "examples" / "langchain_quickstart.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_documented_run_answers_right_within_the_examples_budget(tmp_path: Path) -> None:
    folder = checkout(tmp_path / "reader")
    corpus = make_corpus(n_diseases=4, max_support=16, seed=0)
    gold = corpus.questions_of("treatment")[0]
    commands = documented_commands(EXAMPLE)
    assert [c.split()[-1] for c in commands] == ["dpvote", "dpsparsevote", "dpksa", "murag"]
    for command in commands:
        done = run_command(command, folder)
        assert done.returncode == 0, f"{command}:\n{done.stderr[-3000:]}"
        out = done.stdout
        answer = re.search(r"^answer: (.*)$", out, re.M)
        lcel = re.search(r"^as an LCEL app: (.*)$", out, re.M)
        assert answer and lcel, out
        assert match(answer.group(1), gold.answer) and match(lcel.group(1), gold.answer), out
        assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", out, re.M), out
        for record in corpus.records:  # no record is ever printed
            assert record.text not in out and record.text not in done.stderr
    budget = folder / ".data" / "dprag" / "langchain-quickstart.db"
    assert sorted(p.name for p in budget.parent.glob("*.db")) == [budget.name]
    again = run_command(commands[0], folder)  # the budget paid for one run of each: spent
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr[-3000:]
    (refusal,) = again.stderr.strip().splitlines()[-1:]
    assert refusal.startswith("refused: query needs epsilon=5") and str(budget) in refusal
