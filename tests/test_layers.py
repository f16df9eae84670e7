"""The layer order drawn in docs/architecture.md is the order the imports follow.

The doc's ``layers`` block lists every top-level module and subpackage of
``dprag_core`` (and the two adapter packages) by layer; this test reads every
import statement (lazy and type-checking ones included) and asserts that each
one points to a strictly lower layer, and that the doc names exactly the
modules that exist. The ``accounting layers``, ``langchain_dprag layers``
and ``llamaindex_dprag layers`` blocks do the same inside
``dprag_core.accounting`` and each adapter package (a package's face,
``__init__``, sits above its modules). A new module, a moved one or an
upward import fails here until the doc is redrawn.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dprag_core", "langchain_dprag", "llamaindex_dprag")


def documented_layers(block: str = "layers") -> dict[str, int]:
    """``{component: layer}`` from one of the doc's blocks (``N  name name ...`` lines)."""
    pattern = re.compile(rf"<!-- {block} -->\s*```text\n(.*?)```", re.DOTALL)
    found = pattern.search((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert found, f"docs/architecture.md has no <!-- {block} --> block"
    layers: dict[str, int] = {}
    for line in found.group(1).splitlines():
        if re.match(r"\s*\d", line):
            number, *names = line.split()
            for name in names:
                assert name not in layers, f"{name} is drawn twice"
                layers[name] = int(number)
    return layers


def component(module: str) -> str | None:
    """The layer unit of a dotted module name: ``dprag_core.X`` -> X, an adapter package."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] != "dprag_core":
        return parts[0]
    return parts[1] if len(parts) > 1 else "dprag_core"


def source_component(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    name = component(".".join(parts))
    assert name is not None
    return name


def imports(path: Path) -> set[str]:
    """Every dprag component that ``path`` imports (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in map(component, names) if c is not None)
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            src = source_component(path)
            edges.setdefault(src, set()).update(imports(path) - {src})
    return edges


def test_the_doc_names_every_module_once() -> None:
    assert set(documented_layers()) == set(graph())


@pytest.mark.parametrize("src", sorted(graph()))
def test_imports_point_to_lower_layers_only(src: str) -> None:
    layers = documented_layers()
    upward = {dst for dst in graph()[src] if layers.get(dst, 99) >= layers.get(src, -1)}
    assert not upward, f"{src} (layer {layers.get(src)}) imports {sorted(upward)}"


ACCOUNTING = ROOT / "dprag_core" / "accounting"

INNER = {
    "accounting layers": "dprag_core.accounting",
    "langchain_dprag layers": "langchain_dprag",
    "llamaindex_dprag layers": "llamaindex_dprag",
}
"""The packages whose modules are drawn block by block: the doc's block -> the package."""


def inner_component(package: str, module: str) -> str | None:
    """``package.X...`` -> X (the package face -> ``__init__``); None outside ``package``."""
    parts, prefix = module.split("."), package.split(".")
    if parts[: len(prefix)] != prefix:
        return None
    return parts[len(prefix)] if len(parts) > len(prefix) else "__init__"


def accounting_component(module: str) -> str | None:
    """``dprag_core.accounting.X...`` -> X (the package face -> ``__init__``)."""
    return inner_component("dprag_core.accounting", module)


def inner_graph(package: str) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` inside one package."""
    folder = ROOT.joinpath(*package.split("."))
    edges: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        src = "__init__" if parts == ("__init__",) else parts[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found.add(inner_component(package, node.module or "") or "")
            elif isinstance(node, ast.Import):
                found.update(inner_component(package, a.name) or "" for a in node.names)
        edges.setdefault(src, set()).update(found - {src, ""})
    return edges


def accounting_graph() -> dict[str, set[str]]:
    return inner_graph("dprag_core.accounting")


@pytest.mark.parametrize("block", sorted(INNER))
def test_each_inner_drawing_names_every_module_once(block: str) -> None:
    assert set(documented_layers(block)) == set(inner_graph(INNER[block])) - {"__init__"}


def inner_cases() -> list[tuple[str, str]]:
    return [
        (block, src)
        for block, package in sorted(INNER.items())
        for src in sorted(set(inner_graph(package)) - {"__init__"})
    ]


@pytest.mark.parametrize(("block", "src"), inner_cases())
def test_inner_imports_point_to_lower_layers_only(block: str, src: str) -> None:
    layers = documented_layers(block)
    edges = inner_graph(INNER[block])[src]
    upward = {dst for dst in edges if layers.get(dst, 99) >= layers[src]}
    assert not upward, f"{INNER[block]}.{src} (layer {layers[src]}) imports {sorted(upward)}"


def test_an_upward_import_inside_accounting_is_caught() -> None:
    layers = documented_layers("accounting layers")
    assert layers["stores"] < layers["corpus_durable"] < layers["corpus_sqlite"]
    assert layers["ledger"] >= layers["stores"]  # stores importing the ledger: flagged above
    assert accounting_component("dprag_core.accounting.stores.sqlite") == "stores"
    assert accounting_component("dprag_core.accounting") == "__init__"


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from dprag_core.pipeline import PrivateRAG\n")
    layers = documented_layers()
    assert {layers[c] for c in imports(probe)} == {layers["pipeline"]}
    assert layers["pipeline"] > layers["mechanisms"]


def test_an_upward_import_inside_an_adapter_is_caught() -> None:
    layers = documented_layers("langchain_dprag layers")
    assert layers["stores"] < layers["vectorstores"] < layers["chain"]
    assert inner_component("langchain_dprag", "langchain_dprag.vectorstores") == "vectorstores"
    assert inner_component("langchain_dprag", "langchain_dprag") == "__init__"
    assert inner_component("langchain_dprag", "llamaindex_dprag.stores") is None
    assert "stores" in inner_graph("langchain_dprag")["vectorstores"]
