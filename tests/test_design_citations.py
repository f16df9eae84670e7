"""Citations of the design notes point to sections that exist.

Docstrings, tests and docs cite ``docs/design.md §N``; the notes live in the
repository (it must stand alone), and a citation of a section that is missing
or renumbered fails here, as does a citation of a guide outside the repository
(in the packages, tests, docs, benchmarks, examples, scripts and the README).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/design\.md §(\d+)")


def sections() -> set[int]:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return {int(n) for n in re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE)}


FOLDERS = (
    "dprag_core",
    "langchain_dprag",
    "llamaindex_dprag",
    "tests",
    "docs",
    "benchmarks",
    "examples",
    "scripts",
)


def files() -> list[Path]:
    """Every Python and Markdown file of the packages, tests, docs, tools, and the README."""
    found = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*"))]
    return [p for p in [*found, ROOT / "README.md"] if p.suffix in (".py", ".md")]


def citations() -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for path in files():
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
    citing = {
        str(path.relative_to(ROOT))
        for path in files()
        if path != Path(__file__).resolve() and OUTSIDE.search(path.read_text(encoding="utf-8"))
    }
    assert not citing, f"cite docs/design.md instead: {sorted(citing)}"
