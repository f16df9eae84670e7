"""examples/llamaindex_quickstart.py, run as documented: every mechanism in order in one folder.

As tests/langchain/test_quickstart.py: each command of the usage line runs as
written in a fresh folder, after the LangChain example's runs in the same
folder (two examples, two budgets: neither spends the other's), every answer
names the treatment 16 records support, no record is printed, ``source_nodes``
stays empty, and a query past the example's budget is refused in one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_run import ROOT, checkout, documented_commands, run_command

from dprag_core import Budget, SQLiteCorpusAccountant
from dprag_core.eval.metrics import match
from dprag_core.eval.synthetic import make_corpus

EXAMPLE = ROOT / "examples" / "llamaindex_quickstart.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_documented_run_answers_right_within_the_examples_budget(tmp_path: Path) -> None:
    folder = checkout(tmp_path / "reader")
    data = folder / ".data" / "dprag"
    data.mkdir(parents=True)
    # the LangChain example ran here before, and spent all of its own budget
    SQLiteCorpusAccountant(
        data / "langchain-quickstart.db", total=Budget(46.0, 6e-4), name="langchain-quickstart",
        create=True,
    ).charge(Budget(46.0, 6e-4))  # fmt: skip
    corpus = make_corpus(n_diseases=4, max_support=16, seed=0)
    gold = corpus.questions_of("treatment")[0]
    commands = documented_commands(EXAMPLE)
    assert [c.split()[-1] for c in commands] == [
        "dpvote",
        "dpsparsevote",
        "dpksa",
        "dpicl",
        "murag",
    ]
    for command in commands:
        done = run_command(command, folder)
        assert done.returncode == 0, f"{command}:\n{done.stderr[-3000:]}"
        out = done.stdout
        answer = re.search(r"^answer: (.*)$", out, re.M)
        streamed = re.search(r"^streamed: (.*)$", out, re.M)
        assert answer and streamed, out
        assert match(answer.group(1), gold.answer) and match(streamed.group(1), gold.answer), out
        assert re.search(r"^epsilon=\d[\d.e+-]* delta=\d", out, re.M), out
        assert "source_nodes: []" in out
        for record in corpus.records:  # no record is ever printed
            assert record.text not in out and record.text not in done.stderr
    again = run_command(commands[0], folder)  # the budget paid for one run of each: spent
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr[-3000:]
    (refusal,) = again.stderr.strip().splitlines()[-1:]
    assert refusal.startswith("refused: query needs epsilon=5")
    assert str(data / "llamaindex-quickstart.db") in refusal
