"""Every documented command runs as written: each command block of README.md and docs/*.md.

The rule and the markers are stated once in ``tests/docs_run.py``: every
``python``/``bash`` block runs in its document's order in a fresh folder (a
reader's session), unless the comment before it says why it cannot run here;
``<!-- run: expect ... -->`` states what a block prints. A new page or block is
covered by the rule the day it is written. The README's answers are checked
against the synthetic corpus's gold too, and its quick start, run again in the
same folder, is refused by the budget it spent, naming where it is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_run import ROOT, Block, Session, blocks, checkout, documents, run

from dprag_core.eval.metrics import match
from dprag_core.eval.synthetic import make_corpus

_SESSIONS: dict[str, tuple[Session, Path]] = {}


def session_of(doc: Path, factory: pytest.TempPathFactory) -> tuple[Session, Path]:
    """The run of ``doc``'s command blocks (once per test process), and its folder."""
    key = str(doc.relative_to(ROOT))
    if key not in _SESSIONS:
        folder = checkout(factory.mktemp(doc.stem) / "reader")
        chosen = [b for b in blocks(doc) if b.command and b.skip is None]
        _SESSIONS[key] = (run(chosen, folder), folder)
    return _SESSIONS[key]


def _tail(session: Session) -> str:
    return (
        f"failed in {session.failed}:\n{session.stderr[-5000:]}\n"
        f"--- stdout ---\n{session.stdout[-2000:]}"
    )


def test_every_block_says_what_it_is() -> None:
    """A block is a command (it runs), a marked command (with the reason) or tagged text."""
    problems = []
    for doc in documents():
        for b in blocks(doc):
            if not b.language:
                problems.append(f"{b.name}: untagged (```python, ```bash, ```text, ...)")
            if b.skip is not None and len(re.sub(r"\W", "", b.skip)) < 12:
                problems.append(f"{b.name}: a skip needs its reason: <!-- run: skip (why) -->")
            if (b.skip is not None or b.expects) and not b.command:
                problems.append(f"{b.name}: run markers on a {b.language!r} block")
            if b.skip is not None and b.expects:
                problems.append(f"{b.name}: an expectation on a block that does not run")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.name)
def test_every_command_block_runs_as_written(
    doc: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    session, _ = session_of(doc, tmp_path_factory)
    assert session.returncode == 0, _tail(session)
    for b in blocks(doc):
        for pattern in b.expects:
            printed = session.outputs.get(b.name, "")
            assert re.search(pattern, printed, re.M), f"{b.name} printed:\n{printed}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_readme_answers_right_and_a_rerun_names_the_budget(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    session, folder = session_of(ROOT / "README.md", tmp_path_factory)
    assert session.returncode == 0, _tail(session)
    gold = make_corpus(n_diseases=4, max_support=16, seed=0).questions_of("treatment")[0]
    assert gold.support == 16
    lines = session.stdout.splitlines()
    quick = [re.fullmatch(r"(.*) \| the records say: (\w+)", line) for line in lines]
    (first,) = [m for m in quick if m]
    assert first.group(2) == gold.answer and match(first.group(1), gold.answer), session.stdout
    # the quick start's, the LangChain chains' (word-level DPVote, DPAnswerVote, MuRAG),
    # LlamaIndex's
    answered = [line for line in lines if match(line.split(" | ")[0], gold.answer)]
    assert len(answered) == 5, session.stdout
    assert any(line.endswith(" documents") for line in answered), session.stdout
    assert "no answer released" not in session.stdout
    assert "refused before retrieval" in session.stdout
    # the quick start again, from another folder: its budget is found by its name and is
    # spent, and the refusal says where it is kept and how to look at it
    quick_start = next(b for b in blocks(ROOT / "README.md") if b.command == "python")
    elsewhere = checkout(folder.parent / "another-folder")
    (elsewhere / ".data").symlink_to(folder / ".data")
    again = run([quick_start], elsewhere)
    assert again.returncode != 0
    refusal = again.stderr.strip().splitlines()[-1]
    assert "PrivacyBudgetExhausted" in refusal and "persists" in refusal, refusal
    budget = folder / ".data" / "dprag" / "patients-quickstart.db"
    assert f"see it: dprag ledger status --sqlite {budget} --table corpus" in refusal, refusal


def _page(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return blocks(page)


def test_the_runner_catches_a_failing_block_and_a_wrong_output(tmp_path: Path) -> None:
    """Positive controls: the same runner fails on a block that fails or prints otherwise."""
    found = _page(
        tmp_path,
        "<!-- run: expect ^6$ -->\n```python\nx = 2 * 3\nprint(x)\n```\n\n"
        "<!-- run: skip (needs a server that is not there) -->\n```bash\ncurl http://x\n```\n\n"
        "```bash\necho $((x + 1)) && false\n```\n\n```python\nprint(x)\n```\n",
    )
    assert [b.language for b in found] == ["python", "bash", "bash", "python"]
    assert found[0].expects == ("^6$",) and found[1].skip == "(needs a server that is not there)"
    session = run([b for b in found if b.skip is None], checkout(tmp_path / "reader"))
    assert session.returncode != 0 and session.failed == found[2].name, _tail(session)
    assert session.outputs[found[0].name] == "6\n" and found[3].name not in session.outputs
    assert not re.search("^7$", session.outputs[found[0].name], re.M)
