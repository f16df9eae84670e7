"""The store test kit: pytest suites a vector store integration subclasses.

A store is supported once it is registered (``langchain_dprag.stores.register``
or ``llamaindex_dprag.stores.register``) and passes one of these suites,
subclassed in the integration's own tests with the one method that builds the
store (docs/new-store.md):

- :class:`LangChainStoreSuite`: implement ``make_store(documents, embeddings)``;
- :class:`LlamaIndexStoreSuite`: implement ``make_vector_store()`` (an empty one).

Each suite builds a small corpus of :class:`Record` (seeded unit vectors, a tie
group of three identical vectors, two metadata groups), stores it through the
framework's public API, reads the store through dprag's registry and checks,
against a brute-force ranking computed here in float64:

- **registered**: the registry knows the class, and what it read: a metric
  and how the search is exact, nothing refused;
- **score semantics**: every raw score the exact search returns is the
  registered metric of (question, document) (relative tolerance
  :attr:`~_StoreSuite.tolerance`, for float32 stores);
- **exact ranking**: the first k for several questions and k are the
  brute-force first k;
- **ties**: a tie group cut at k keeps the members with the smallest ids (one
  fixed ranking, ties by id);
- **filters**: the registered equality filter selects the exact first k of the
  selected documents (skipped where the registration has none);
- **partitioned search**: with a public partition, the exact first k of the
  documents of the probed cells, its exactness stated as the partition's
  (skipped where the registration has no cell filter);
- **D vs D + x**: the first k of the corpus with one added record ``x``, ``x``
  removed, is the first k (less one when ``x`` entered) of the corpus without
  it: ``x`` is inserted into one fixed ranking and nothing else moves, exactly
  and partitioned (the property every DP selection proof in dprag rests on).

>>> rows = records(n=6, dim=4, seed=0)
>>> len(rows), rows[0].ref
(6, 'r00')
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from dprag_core.retrieval.cell_search import partitioned_exact
from dprag_core.retrieval.cells import CELL_KEY, PublicPartition
from dprag_core.retrieval.exact import EXACT_METRICS, raw_scores
from dprag_core.retrieval.scores import METRICS, read_score
from dprag_core.retrieval.ties import tie_complete

__all__ = [
    "LangChainStoreSuite",
    "LlamaIndexStoreSuite",
    "Record",
    "expected_refs",
    "queries",
    "raw_metric",
    "records",
]

_NAMESPACE = uuid.UUID("5f0c2c1e-8d57-4b2b-9a57-2f1d0c9a7e11")


@dataclass(frozen=True)
class Record:
    """One stored document: ``ref`` (its name, in ``metadata["ref"]``), text, unit vector,
    ``group`` (``"a"`` or ``"b"``, in ``metadata["group"]``) and ``cell`` (set for the
    partitioned search)."""

    ref: str
    text: str
    vector: tuple[float, ...]
    group: str
    cell: int | None = None

    def metadata(self) -> dict[str, Any]:
        """The metadata the kit stores with it."""
        meta: dict[str, Any] = {"ref": self.ref, "group": self.group}
        if self.cell is not None:
            meta[CELL_KEY] = self.cell
        return meta


def _unit(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    unit: npt.NDArray[np.float64] = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return unit


def records(*, n: int = 24, dim: int = 8, seed: int = 0) -> list[Record]:
    """``n`` records with seeded unit vectors; the last three share one vector (a tie group)."""
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.standard_normal((n, dim)))
    vectors[-3:] = vectors[-3]
    return [
        Record(f"r{i:02d}", f"record {i} of the kit (seed {seed})", tuple(map(float, v)),
               "a" if i % 2 == 0 else "b")
        for i, v in enumerate(vectors)
    ]  # fmt: skip


def queries(*, dim: int = 8, count: int = 3, seed: int = 100) -> list[tuple[float, ...]]:
    """``count`` seeded unit query vectors."""
    rng = np.random.default_rng(seed)
    return [tuple(map(float, q)) for q in _unit(rng.standard_normal((count, dim)))]


def raw_metric(metric: str, query: Sequence[float], vectors: Sequence[Sequence[float]]) -> Any:
    """The raw score of each vector for ``query`` under ``metric`` (float64)."""
    q = np.asarray(query, dtype=np.float64)
    x = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1)
    if metric in EXACT_METRICS:
        return raw_scores(q, x, metric=metric)
    if metric == "negative_inner_product":
        return -(x @ q)
    if metric == "manhattan":
        return np.abs(x - q).sum(axis=1)
    raise ValueError(f"metric {metric!r} has no reference computation in the kit")


def expected_refs(rows: Sequence[Record], query: Sequence[float], metric: str, k: int) -> list[str]:
    """The brute-force first ``k`` refs (ties: the caller compares tie groups as sets)."""
    raw = raw_metric(metric, query, [r.vector for r in rows])
    best = -raw if METRICS[metric].direction == "distance" else raw
    order = sorted(range(len(rows)), key=lambda i: (-round(float(best[i]), 9), rows[i].ref))
    return [rows[i].ref for i in order[:k]]


def _groups(rows: Sequence[Record], query: Sequence[float], metric: str) -> list[list[str]]:
    """The brute-force ranking as groups of tied refs (equal vectors), best first."""
    raw = raw_metric(metric, query, [r.vector for r in rows])
    best = -raw if METRICS[metric].direction == "distance" else raw
    by_vector: dict[tuple[float, ...], list[str]] = {}
    for r in rows:
        by_vector.setdefault(r.vector, []).append(r.ref)
    order = sorted(range(len(rows)), key=lambda i: (-float(best[i]), rows[i].ref))
    seen: set[tuple[float, ...]] = set()
    out = []
    for i in order:
        if rows[i].vector not in seen:
            seen.add(rows[i].vector)
            out.append(by_vector[rows[i].vector])
    return out


def _same_up_to_ties(found: Sequence[str], groups: Sequence[Sequence[str]]) -> bool:
    """Whether ``found`` is a prefix of the ranking ``groups`` (members of a group in any
    order, the last group possibly cut)."""
    rest = list(found)
    for group in groups:
        if not rest:
            return True
        take, rest = rest[: len(group)], rest[len(group) :]
        if not set(take) <= set(group) or (rest and len(take) < len(group)):
            return False
    return not rest


class _StoreSuite:
    """What both suites share: the corpus, the questions, the partition, the checks."""

    dim: ClassVar[int] = 8
    """The vectors' dimension."""
    size: ClassVar[int] = 24
    """How many records the corpus holds."""
    tolerance: ClassVar[float] = 1e-4
    """Relative tolerance on raw scores (float32 stores)."""
    ks: ClassVar[tuple[int, ...]] = (1, 5, 10)
    """The k the ranking checks ask for."""

    def corpus(self, seed: int = 0) -> list[Record]:
        """The corpus (override to store other records)."""
        return records(n=self.size, dim=self.dim, seed=seed)

    def new_record(self) -> Record:
        """``x``, the record D + x adds: a copy of a record's neighbourhood (it enters the top)."""
        q = np.asarray(queries(dim=self.dim, count=1)[0])
        vector = _unit(q + 0.05 * np.ones(self.dim))
        return Record("x", "the added record x", tuple(map(float, vector)), "a")

    def partition(self) -> PublicPartition:
        """The public partition the partitioned checks use (seeded random directions)."""
        return PublicPartition.random(dim=self.dim, cells=4, probes=2, seed=3)

    def with_cells(self, rows: Sequence[Record]) -> list[Record]:
        """``rows`` with the partition's cell of each vector."""
        cells = self.partition().assign(np.asarray([r.vector for r in rows]))
        return [replace(r, cell=int(c)) for r, c in zip(rows, cells, strict=True)]

    def questions(self) -> list[tuple[float, ...]]:
        """The query vectors."""
        return queries(dim=self.dim)

    # -- what each framework provides ---------------------------------------------------

    def metric_of(self, store: Any) -> str:
        """The metric the registration read from ``store``."""
        raise NotImplementedError

    def first(
        self, store: Any, query: Sequence[float], k: int, *, partition: PublicPartition | None
    ) -> list[tuple[str, float]]:
        """``(ref, raw score)`` of the exact first ``k`` through dprag's reading."""
        raise NotImplementedError

    def first_filtered(
        self, store: Any, query: Sequence[float], k: int, group: str
    ) -> list[str] | None:
        """Refs of the first ``k`` of ``group`` through the registered filter (None: none)."""
        raise NotImplementedError

    def build(self, rows: Sequence[Record]) -> Any:
        """A store holding ``rows`` (cells in their metadata when set)."""
        raise NotImplementedError

    def build_partitioned(self, rows: Sequence[Record]) -> Any:
        """A store holding ``rows`` for the partitioned search (default: :meth:`build`)."""
        return self.build(rows)

    def has_cell_filter(self, store: Any) -> bool:
        """Whether the registration restricts its search to cells."""
        raise NotImplementedError

    # -- the checks ---------------------------------------------------------------------

    def test_registered(self) -> None:
        """The registry reads the store: a metric, an exact search, nothing refused."""
        store = self.build(self.corpus())
        assert self.metric_of(store) in METRICS

    def test_score_semantics(self) -> None:
        """Each raw score is the registered metric of (question, document)."""
        rows = self.corpus()
        store = self.build(rows)
        metric = self.metric_of(store)
        vectors = {r.ref: r.vector for r in rows}
        for query in self.questions():
            found = self.first(store, query, max(self.ks), partition=None)
            assert found, "the exact search returned nothing"
            want = raw_metric(metric, query, [vectors[ref] for ref, _ in found])
            got = np.asarray([raw for _, raw in found], dtype=np.float64)
            np.testing.assert_allclose(got, want, rtol=self.tolerance, atol=self.tolerance)

    def test_exact_ranking(self) -> None:
        """The first k are the brute-force first k (tie groups as sets), for each k."""
        rows = self.corpus()
        store = self.build(rows)
        metric = self.metric_of(store)
        for query in self.questions():
            groups = _groups(rows, query, metric)
            for k in self.ks:
                refs = [ref for ref, _ in self.first(store, query, k, partition=None)]
                assert len(refs) == min(k, len(rows))
                assert _same_up_to_ties(refs, groups), (k, refs, groups[:k])

    def test_ties_are_cut_by_id(self) -> None:
        """A tie group cut at k: the same members whatever k above the cut (ties by id)."""
        rows = self.corpus()
        store = self.build(rows)
        metric = self.metric_of(store)
        tied = rows[-1].vector
        query = tuple(map(float, _unit(np.asarray(tied) + 0.3 * np.asarray(self.questions()[0]))))
        groups = _groups(rows, query, metric)
        start = sum(len(g) for g in groups[: [tuple(g) for g in groups].index(
            tuple(r.ref for r in rows if r.vector == tied))])  # fmt: skip
        whole = [ref for ref, _ in self.first(store, query, start + 3, partition=None)][start:]
        assert sorted(whole) == sorted(r.ref for r in rows if r.vector == tied)
        for cut in (1, 2):
            refs = [ref for ref, _ in self.first(store, query, start + cut, partition=None)]
            assert refs[start:] == whole[:cut], "tied documents cut by something else than id"

    def test_filters(self) -> None:
        """The registered equality filter: the exact first k of the selected documents."""
        rows = self.corpus()
        store = self.build(rows)
        metric = self.metric_of(store)
        selected = [r for r in rows if r.group == "a"]
        for query in self.questions():
            found = self.first_filtered(store, query, 5, "a")
            if found is None:
                pytest.skip("the registration has no equality filter")
            assert _same_up_to_ties(found, _groups(selected, query, metric)), found

    def test_partitioned_search(self) -> None:
        """With a public partition: the exact first k of the probed cells' documents."""
        rows = self.with_cells(self.corpus())
        store = self.build_partitioned(rows)
        if not self.has_cell_filter(store):
            pytest.skip("the registration has no cell filter")
        partition = self.partition()
        metric = self.metric_of_partitioned(store)
        for query in self.questions():
            probed = set(partition.probe(np.asarray(query)))
            inside = [r for r in rows if r.cell in probed]
            for k in self.ks:
                refs = [ref for ref, _ in self.first(store, query, k, partition=partition)]
                assert len(refs) == min(k, len(inside))
                assert _same_up_to_ties(refs, _groups(inside, query, metric)), (k, refs)

    def metric_of_partitioned(self, store: Any) -> str:
        """The metric of the partitioned reading (default: :meth:`metric_of`)."""
        return self.metric_of(store)

    def test_d_vs_d_plus_x(self) -> None:
        """D + x: x is inserted into the ranking of D and nothing else moves."""
        self._check_neighbours(partitioned=False)

    def test_d_vs_d_plus_x_partitioned(self) -> None:
        """The same in the probed cells of a public partition."""
        self._check_neighbours(partitioned=True)

    def _check_neighbours(self, *, partitioned: bool) -> None:
        rows, x = self.corpus(), self.new_record()
        partition = self.partition() if partitioned else None
        if partitioned:
            rows, (x,) = self.with_cells(rows), self.with_cells([x])
        store = self.build_partitioned(rows) if partitioned else self.build(rows)
        if partitioned and not self.has_cell_filter(store):
            pytest.skip("the registration has no cell filter")
        pairs = [(q, k) for q in self.questions() for k in self.ks]
        before = [
            [ref for ref, _ in self.first(store, q, k, partition=partition)] for q, k in pairs
        ]
        self.add(store, x)
        entered = False
        for (query, k), d in zip(pairs, before, strict=True):
            dx = self._refs(store, query, k, partition)
            entered = entered or "x" in dx
            kept = [ref for ref in dx if ref != "x"]
            assert kept == d[: len(kept)], (k, d, dx)
        assert entered, "x never entered a top k: the check would hold for any store"

    def add(self, store: Any, record: Record) -> None:
        """Add ``record`` to ``store`` (D becomes D + x)."""
        raise NotImplementedError

    def _refs(
        self, store: Any, query: Sequence[float], k: int, partition: PublicPartition | None
    ) -> list[str]:
        return [ref for ref, _ in self.first(store, query, k, partition=partition)]


class LangChainStoreSuite(_StoreSuite):
    """The store suite for a LangChain ``VectorStore``: implement :meth:`make_store`.

    Override :meth:`make_partitioned_store` where a partitioned store is built
    differently (FAISS: ``partitioned_faiss``).
    """

    def make_store(self, documents: list[Any], embeddings: Any) -> Any:
        """A store holding ``documents`` (their ids set), embedded with ``embeddings``."""
        raise NotImplementedError

    def make_partitioned_store(
        self, documents: list[Any], embeddings: Any, partition: PublicPartition
    ) -> Any:
        """A store for the partitioned search (``documents`` carry their cell); default
        :meth:`make_store`."""
        return self.make_store(documents, embeddings)

    def embeddings(self, rows: Sequence[Record]) -> Any:
        """LangChain embeddings: each record's text -> its vector, a question -> its query."""
        from langchain_core.embeddings import Embeddings

        table = {r.text: list(r.vector) for r in rows}
        table.update({_question(q): list(q) for q in self.questions()})
        dim = self.dim

        class KitEmbeddings(Embeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return [self.embed_query(t) for t in texts]

            def embed_query(self, text: str) -> list[float]:
                return table.get(text, [1.0] + [0.0] * (dim - 1))

        return KitEmbeddings()

    def documents(self, rows: Sequence[Record]) -> list[Any]:
        """``rows`` as Documents with fresh UUID ids (unique across stores, ordered as the refs:
        ties are cut the same way in D and D + x)."""
        from langchain_core.documents import Document

        return [
            Document(page_content=r.text, metadata=r.metadata(), id=_ordered_uuid(r.ref))
            for r in rows
        ]

    def build(self, rows: Sequence[Record]) -> Any:
        rows = [*rows, self.new_record()]  # x's text is embedded when it is added
        return self.make_store(self.documents(rows[:-1]), self.embeddings(rows))

    def build_partitioned(self, rows: Sequence[Record]) -> Any:
        rows = [*rows, self.new_record()]
        return self.make_partitioned_store(
            self.documents(rows[:-1]), self.embeddings(rows), self.partition()
        )

    def add_documents(self, store: Any, documents: list[Any]) -> None:
        """Add ``documents`` (ids set) to ``store``; default its ``add_documents``."""
        store.add_documents(documents, ids=[d.id for d in documents])

    def add(self, store: Any, record: Record) -> None:
        self.add_documents(store, self.documents([record]))

    def _reading(self, store: Any, partition: PublicPartition | None) -> Any:
        from langchain_dprag.stores import read_store

        return read_store(store, partition)

    def metric_of(self, store: Any) -> str:
        from langchain_dprag.stores import STORES

        assert STORES.lookup(store) is not None, f"{type(store).__name__} is not registered"
        facts = self._reading(store, None).facts
        assert facts.refused is None, facts.refused
        assert facts.metric is not None and facts.exact is not None, facts
        return str(facts.metric)

    def metric_of_partitioned(self, store: Any) -> str:
        facts = self._reading(store, self.partition()).facts
        assert facts.refused is None and facts.metric is not None, facts
        assert facts.exact == partitioned_exact(self.partition()), facts
        return str(facts.metric)

    def has_cell_filter(self, store: Any) -> bool:
        from langchain_dprag.stores import STORES

        support = STORES.lookup(store)
        return support is not None and support.partitioned is not None

    def first(
        self, store: Any, query: Sequence[float], k: int, *, partition: PublicPartition | None
    ) -> list[tuple[str, float]]:
        """The first k as ``open_store`` ranks them (ties by id), with the raw scores."""
        from langchain_dprag.units import document_id
        from langchain_dprag.vectorstores import open_store

        reading = self._reading(store, partition)
        open_store(store, reading=reading)  # refuses now what a chain would refuse
        search = reading.searcher()
        found = tie_complete(
            lambda n: search(_question(query), n),
            k,
            score=lambda pair: read_score(pair[1]),
            ident=lambda pair: document_id(pair[0]),
        )
        return [(d.metadata["ref"], float(s)) for d, s in found]

    def first_filtered(
        self, store: Any, query: Sequence[float], k: int, group: str
    ) -> list[str] | None:
        from langchain_dprag.vectorstores import open_store

        reading = self._reading(store, None)
        if reading.equals is None:
            return None
        opened = open_store(store, reading=reading)
        found = opened.searcher(reading.equals("group", group))(_question(query), k)
        return [d.metadata["ref"] for d, _ in found]


def _ordered_uuid(ref: str) -> str:
    """A fresh UUID whose first bytes are ``ref``'s: ids sort as the refs do."""
    head = ref.encode("utf-8")[:4].ljust(4, b"\0").hex()
    return str(uuid.UUID(head + uuid.uuid4().hex[8:]))


def _question(query: Sequence[float]) -> str:
    return "kit question " + ",".join(f"{v:.6f}" for v in query)


class LlamaIndexStoreSuite(_StoreSuite):
    """The store suite for a LlamaIndex vector store: implement :meth:`make_vector_store`.

    Override :meth:`make_partitioned_vector_store` where a partitioned store is
    built differently (FAISS: ``partitioned_faiss_store``).
    """

    def make_vector_store(self) -> Any:
        """A new, empty vector store (the kit adds nodes through a ``VectorStoreIndex``)."""
        raise NotImplementedError

    def make_partitioned_vector_store(self, partition: PublicPartition) -> Any:
        """An empty store for the partitioned search; default :meth:`make_vector_store`."""
        return self.make_vector_store()

    def nodes(self, rows: Sequence[Record]) -> list[Any]:
        """``rows`` as TextNodes with their vectors and UUID ids."""
        from llama_index.core.schema import TextNode

        return [
            TextNode(id_=str(uuid.uuid5(_NAMESPACE, r.ref)), text=r.text, metadata=r.metadata(),
                     embedding=list(r.vector))
            for r in rows
        ]  # fmt: skip

    def _index(self, vector_store: Any, rows: Sequence[Record]) -> Any:
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.core.embeddings import MockEmbedding

        storage = StorageContext.from_defaults(vector_store=vector_store)
        return VectorStoreIndex(
            self.nodes(rows), storage_context=storage, embed_model=MockEmbedding(embed_dim=self.dim)
        )

    def build(self, rows: Sequence[Record]) -> Any:
        return self._index(self.make_vector_store(), rows)

    def build_partitioned(self, rows: Sequence[Record]) -> Any:
        return self._index(self.make_partitioned_vector_store(self.partition()), rows)

    def add(self, store: Any, record: Record) -> None:
        store.insert_nodes(self.nodes([record]))

    def _facts(self, index: Any, partition: PublicPartition | None) -> Any:
        from llamaindex_dprag.stores import read_vector_store

        return read_vector_store(index.vector_store, partition).facts

    def metric_of(self, store: Any) -> str:
        from llamaindex_dprag.stores import STORES

        cls = type(store.vector_store).__name__
        assert STORES.lookup(store.vector_store) is not None, f"{cls} is not registered"
        facts = self._facts(store, None)
        assert facts.refused is None, facts.refused
        assert facts.metric is not None and facts.exact is not None, facts
        return str(facts.metric)

    def metric_of_partitioned(self, store: Any) -> str:
        facts = self._facts(store, self.partition())
        assert facts.refused is None and facts.metric is not None, facts
        assert facts.exact == partitioned_exact(self.partition()), facts
        return str(facts.metric)

    def has_cell_filter(self, store: Any) -> bool:
        from llamaindex_dprag.stores import STORES

        support = STORES.lookup(store.vector_store)
        return support is not None and support.partitioned is not None

    def _source(self, index: Any, partition: PublicPartition | None, **options: Any) -> Any:
        from llamaindex_dprag.sources import IndexSource

        metric = self.metric_of_partitioned(index) if partition else self.metric_of(index)
        return IndexSource(
            index, score_direction=METRICS[metric].direction, partition=partition, **options
        )

    def first(
        self, store: Any, query: Sequence[float], k: int, *, partition: PublicPartition | None
    ) -> list[tuple[str, float]]:
        """Through ``IndexSource`` (what the query engine and retriever use), raw scores."""
        found = self._source(store, partition).nodes(_question(query), list(query), k)
        return [(n.node.metadata["ref"], float(n.score)) for n in found]

    def first_filtered(
        self, store: Any, query: Sequence[float], k: int, group: str
    ) -> list[str] | None:
        from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

        from llamaindex_dprag.stores import read_vector_store

        if not read_vector_store(store.vector_store).filters:
            return None
        filters = MetadataFilters(filters=[MetadataFilter(key="group", value=group)])
        found = self._source(store, None, filters=filters).nodes(_question(query), list(query), k)
        return [n.node.metadata["ref"] for n in found]
