"""examples/llamaindex_quickstart.py, run as documented: every mechanism in order in one folder.

As tests/langchain/test_quickstart.py: each command of the usage line runs as
written in a fresh folder, after the LangChain example's runs in the same
folder (two examples, two budgets: neither spends the other's), every answer
names the treatment 16 records support, no record is printed, ``source_nodes``
stays empty, and a query past the example's budget is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_run import ROOT, checkout, refused_in_one_line, run_example_in_order

from dprag_core import Budget, SQLiteCorpusAccountant

EXAMPLE = ROOT / "examples" / "llamaindex_quickstart.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_documented_run_answers_right_within_the_examples_budget(tmp_path: Path) -> None:
    folder = checkout(tmp_path / "reader")
    data = folder / ".data" / "dprag"
    data.mkdir(parents=True)
    # the LangChain example ran here before, and spent all of its own budget
    spent = Budget(56.0, 8e-4)
    SQLiteCorpusAccountant(
        data / "langchain-quickstart.db", total=spent, name="langchain-quickstart", create=True
    ).charge(spent)
    commands = run_example_in_order(EXAMPLE, folder, ("answer", "streamed"), ("source_nodes: []",))
    names = ["dpvote", "dpsparsevote", "dpksa", "dpanswervote", "dpicl", "murag"]
    assert [c.split()[-1] for c in commands] == names
    refusal = refused_in_one_line(commands[0], folder)  # its budget paid for one run of each
    assert refusal.startswith("refused: query needs epsilon=5")
    assert str(data / "llamaindex-quickstart.db") in refusal
