"""examples/langchain_quickstart.py, run as documented: every mechanism in order in one folder.

Each command of the example's usage line runs as written, one after the other
in a fresh folder (``tests/docs_run.py``: seeded DP noise, the folder's own
budget directory): every mechanism's answer names the treatment 16 records
support, the example's own budget pays for exactly these runs, no record is
ever printed, and one more query is refused in one line, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_run import ROOT, checkout, refused_in_one_line, run_example_in_order

EXAMPLE = ROOT / "examples" / "langchain_quickstart.py"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_documented_run_answers_right_within_the_examples_budget(tmp_path: Path) -> None:
    folder = checkout(tmp_path / "reader")
    commands = run_example_in_order(EXAMPLE, folder, ("answer", "as an LCEL app"))
    assert [c.split()[-1] for c in commands] == [
        "dpvote",
        "dpsparsevote",
        "dpksa",
        "dpanswervote",
        "murag",
    ]
    budget = folder / ".data" / "dprag" / "langchain-quickstart.db"
    assert sorted(p.name for p in budget.parent.glob("*.db")) == [budget.name]
    refusal = refused_in_one_line(commands[0], folder)  # its budget paid for one run of each
    assert refusal.startswith("refused: query needs epsilon=5") and str(budget) in refusal
