"""The store registry: one registered description per vector store class and framework.

dprag reads a vector store through what is registered for its class, never
through a table of class names kept elsewhere: each framework has one
:class:`StoreRegistry` (``langchain_dprag.registry.STORES``,
``llamaindex_dprag.registry.STORES``), and every list that names stores (the
supported ones in error messages, the partitioned ones, the counters and
dimension readers) is derived from it. A :class:`StoreSupport` names its
classes by their path (``"package.module.Qualname"``), so registering a store
imports nothing: its package is imported only when one of its stores is read.

What a registration describes (the framework's ``read(store, partition)``
returns it for one store object; its fields are the framework's reading type):

- **score semantics**: the :data:`~dprag_core.retrieval.scores.METRICS` name of
  the raw scores (:class:`~dprag_core.retrieval.stores.StoreFacts` ``metric``);
- **exact search**: how its top k is the exact top k of one ranking
  (``exact``), and the search itself, exact among the documents a filter in
  the store's own format selects;
- **the cell filter**: how to restrict that same search to a public
  partition's cells (:class:`Cells` -> the store's own filter). A partitioned
  search is the exact search plus this filter, never a second searcher;
- **refusal and fix**: a configuration it cannot use (``refused``, naming
  the fix);
- **documents and ids**: how its results read back as the framework's
  documents with their ids, how many vectors it holds (``count``) and their
  dimension (``dimension``), both read when an app is built.

Lookup walks the store object's MRO and returns the first registered class
path; a registration matches subclasses only when it says so
(``subclasses=True``): a subclass may override the search it describes.

>>> registry: StoreRegistry[str] = StoreRegistry("example")
>>> _ = registry.register(StoreSupport(("builtins.dict",), "dict", lambda s, p: "read"))
>>> registry.lookup({}).label, registry.lookup([]) is None
('dict', True)
>>> registry.labels()
'dict'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dprag_core.retrieval.cells import CELL_KEY, PublicPartition

__all__ = ["Cells", "StoreRegistry", "StoreSupport", "class_path"]

R = TypeVar("R")
S = TypeVar("S", bound="StoreSupport[Any]")


def class_path(cls: type) -> str:
    """``"module.Qualname"`` of ``cls``: how registrations name classes.

    >>> class_path(dict)
    'builtins.dict'
    """
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class Cells:
    """The cell filter: keep the documents whose cell (``metadata[key]``) is one of ``cells``.

    The probed cells of one question
    (:meth:`~dprag_core.retrieval.cells.PublicPartition.probe`, a function of
    the question alone); a registration turns it into the store's own filter.

    >>> Cells((3, 7)).cells, Cells((3,)).key
    ((3, 7), 'dprag_cell')
    """

    cells: tuple[int, ...]
    key: str = CELL_KEY

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", tuple(int(c) for c in self.cells))


@dataclass(frozen=True)
class StoreSupport(Generic[R]):
    """One store's registration in one framework.

    ``classes``: the class paths it describes (:func:`class_path`; no import);
    ``label``: how lists of supported stores name it; ``read(store,
    partition)``: the framework's reading of one store object (``partition``:
    ``None`` for the exact search, else the
    :class:`~dprag_core.retrieval.cells.PublicPartition` whose cells the search
    is restricted to); ``count(store)`` / ``dimension(store)``: how many
    vectors it holds and their dimension (``None``: not read);
    ``recorded_model(store)``: the embedding model the store records having made
    its vectors with (``None``: it records none; an app whose embedding object
    names another is refused when built, :mod:`~dprag_core.retrieval.embedding_record`);
    ``partitioned``: how lists of partitioned stores name it (``None``: its
    search cannot be restricted to cells); ``subclasses``: whether subclasses
    of its classes are read the same way (default False).
    """

    classes: tuple[str, ...]
    label: str
    read: Callable[[Any, PublicPartition | None], R]
    count: Callable[[Any], int | None] | None = None
    dimension: Callable[[Any], int | None] | None = None
    recorded_model: Callable[[Any], str | None] | None = None
    partitioned: str | None = None
    subclasses: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.classes, str) or not self.classes:
            raise TypeError("classes must be a non-empty tuple of 'module.Qualname' strings")
        for path in self.classes:
            if not isinstance(path, str) or "." not in path.strip("."):
                raise ValueError(f"classes must be 'module.Qualname' strings, got {path!r}")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError("label must be a non-empty str")
        if not callable(self.read):
            raise TypeError("read must be callable: read(store, partition) -> reading")


class StoreRegistry(Generic[R]):
    """A framework's registrations, by class path.

    ``builtins``: modules that register the framework's own stores, imported
    on first use (each imports only dprag and the framework at import time).
    """

    def __init__(self, framework: str, *, builtins: Iterable[str] = ()) -> None:
        self.framework = framework
        self._builtins = tuple(builtins)
        self._loaded = False
        self._by_path: dict[str, StoreSupport[R]] = {}

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._builtins:
                importlib.import_module(module)

    def register(self, support: S) -> S:
        """Add ``support``; ValueError if one of its classes is registered already."""
        if not isinstance(support, StoreSupport):
            raise TypeError(f"support must be a StoreSupport, got {type(support).__name__}")
        self._load()
        taken = [p for p in support.classes if p in self._by_path]
        if taken:
            raise ValueError(
                f"{', '.join(taken)} already registered for {self.framework} "
                f"({self._by_path[taken[0]].label}): unregister it first"
            )
        for path in support.classes:
            self._by_path[path] = support
        return support

    def unregister(self, support: StoreSupport[R]) -> None:
        """Remove ``support``'s classes (those it registered)."""
        for path in support.classes:
            if self._by_path.get(path) is support:
                del self._by_path[path]

    def lookup(self, store: object) -> StoreSupport[R] | None:
        """The registration for ``store``'s class (MRO order), or None."""
        self._load()
        for depth, cls in enumerate(type(store).__mro__):
            support = self._by_path.get(class_path(cls))
            if support is not None and (depth == 0 or support.subclasses):
                return support
        return None

    def supports(self) -> tuple[StoreSupport[R], ...]:
        """Every registration, in registration order, once."""
        self._load()
        return tuple(dict.fromkeys(self._by_path.values()))

    def labels(self, *, partitioned: bool = False) -> str:
        """The registered stores' labels (the partitioned ones' with ``partitioned=True``)."""
        if partitioned:
            return ", ".join(s.partitioned for s in self.supports() if s.partitioned)
        return ", ".join(s.label for s in self.supports())

    def count(self, store: object) -> int | None:
        """How many vectors ``store`` holds, where its registration reads it (else None)."""
        support = self.lookup(store)
        return None if support is None or support.count is None else support.count(store)

    def dimension(self, store: object) -> int | None:
        """The dimension of ``store``'s vectors, where its registration reads it (else None)."""
        support = self.lookup(store)
        return None if support is None or support.dimension is None else support.dimension(store)

    def recorded_model(self, store: object) -> str | None:
        """The embedding model ``store`` records having made its vectors with (else None)."""
        support = self.lookup(store)
        if support is None or support.recorded_model is None:
            return None
        return support.recorded_model(store)
