"""Citations of the design notes point to sections that exist.

Docstrings, tests and docs cite ``docs/design.md §N``; the notes live in the
repository (it must stand alone), and a citation of a section that is missing
or renumbered fails here, as does a citation of a guide outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/design\.md §(\d+)")


def sections() -> set[int]:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return {int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)}


def citations() -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    folders = ("dprag_core", "langchain_dprag", "llamaindex_dprag", "tests", "docs")
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md"):
                cited = {int(n) for n in CITATION.findall(path.read_text(encoding="utf-8"))}
                if cited:
                    found[str(path.relative_to(ROOT))] = cited
    return found


def test_the_notes_have_numbered_sections() -> None:
    assert sections() >= set(range(1, 11))


def test_every_citation_names_an_existing_section() -> None:
    cited = citations()
    assert cited, "no file cites docs/design.md: the probe would find nothing"
    missing = {f: sorted(n - sections()) for f, n in cited.items() if n - sections()}
    assert not missing, f"citations of sections that do not exist: {missing}"


OUTSIDE = re.compile(r"DESIGN(\.md)? §|shared/DESIGN|shared/papers")


def test_nothing_cites_a_guide_outside_the_repository() -> None:
    folders = ("dprag_core", "langchain_dprag", "llamaindex_dprag", "tests", "docs")
    citing = {
        str(path.relative_to(ROOT))
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in (".py", ".md") and path != Path(__file__).resolve()
        if OUTSIDE.search(path.read_text(encoding="utf-8"))
    }
    assert not citing, f"cite docs/design.md instead: {sorted(citing)}"
