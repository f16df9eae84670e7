"""Every dprag import and dotted name the docs show works.

The guides (``docs/*.md``), the README and ``examples/`` tell users what to
import; after a move (``DPAnswer`` to ``dprag_core.answers``, ``DPThreshold`` to
``dprag_core.retrieval``) or a trimmed package face, a stale line there would
fail only in the user's hands. Each ``from dprag... import a, b`` line and
each dotted name ``dprag_core.x.y`` is resolved here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = r"(?:dprag_core|langchain_dprag|llamaindex_dprag)"
FROM_IMPORT = re.compile(
    rf"from\s+({PACKAGES}[\w.]*)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:$|`|#)", re.M
)
DOTTED = re.compile(rf"\b({PACKAGES}(?:\.\w+)+)")


def documents() -> list[Path]:
    """The guides, the README and the examples."""
    found = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    return found + sorted((ROOT / "examples").glob("*.py"))


def imported(text: str) -> set[tuple[str, str]]:
    """``(module, name)`` of every ``from <dprag package> import ...`` in ``text``.

    >>> sorted(imported("from dprag_core.budget import Budget, DPAnswer  # old"))
    [('dprag_core.budget', 'Budget'), ('dprag_core.budget', 'DPAnswer')]
    """
    pairs = set()
    for module, names in FROM_IMPORT.findall(text):
        for name in names.replace("\n", " ").split(","):
            name = name.split(" as ")[0].strip()
            if re.fullmatch(r"\w+", name):
                pairs.add((module, name))
    return pairs


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from the longest one.

    >>> resolves("dprag_core.answers.DPAnswer"), resolves("dprag_core.budget.DPAnswer")
    (True, False)
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_import_and_name_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    stale = sorted(f"{m}.{n}" for m, n in imported(text) if not resolves(f"{m}.{n}"))
    names = {d for d in DOTTED.findall(text) if not d.endswith((".py", ".md"))}
    stale += sorted(d for d in names if not resolves(d))
    assert not stale, f"{path.relative_to(ROOT)} names what does not exist: {stale}"


def test_the_probe_sees_the_documents() -> None:
    """Positive control: the guides hold imports to check, and a stale one is seen."""
    assert sum(len(imported(p.read_text(encoding="utf-8"))) for p in documents()) > 50
    assert not resolves("dprag_core.algorithms.DPThreshold")  # moved to dprag_core.retrieval
