"""Turn a LangChain retriever or vector store into a dprag ``Retriever`` callable.

Each call shows up in the trace as a retriever run nested under the chain run
(``on_retriever_start`` with the question), but the retrieved documents are
never handed to a callback: the run ends with an empty document list, and the
user's retriever itself runs *sealed* (no inherited callbacks, tracing off; see
:mod:`langchain_dprag._sealed`), so nothing inside it is traced either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.callbacks import CallbackManager
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore

from dprag_core.retrieval.above import Retriever
from dprag_core.retrieval.documents import ScoredDocument
from langchain_dprag._sealed import run_sealed, sealed_config
from langchain_dprag.errors import PrivateDataError, guarded
from langchain_dprag.units import to_scored_document
from langchain_dprag.vectorstores import ScoreFunction, search_with_scores

__all__ = ["DocumentSource"]


@dataclass(frozen=True)
class DocumentSource:
    """Where candidates come from: a vector store with scores, or any retriever.

    A ``BaseRetriever`` is asked for ``k`` documents (``invoke(q, k=k)``) and its
    scores are read from ``metadata[score_key]``; a retriever without scores can
    feed mechanisms that take the top n (DPSparseVote, DP-KSA, ...) but not those
    that select by score (MuRAG), which then raise a ``ValueError``.
    """

    retriever: BaseRetriever | None
    vectorstore: VectorStore | None
    score_function: ScoreFunction
    score_key: str
    unit_key: str | None

    @property
    def name(self) -> str:
        """The run name shown in traces (the retriever's or the store's class name)."""
        if self.retriever is not None:
            return self.retriever.get_name()
        return type(self.vectorstore).__name__

    def _search(self, question: str, k: int) -> list[tuple[Document, float | None]]:
        if self.vectorstore is not None:
            pairs = search_with_scores(self.vectorstore, question, k, self.score_function)
            return [(doc, score) for doc, score in pairs]
        assert self.retriever is not None
        found = self.retriever.invoke(question, sealed_config(), k=k)
        docs = [d for d in found if isinstance(d, Document)][:k]  # after the charge: no errors
        return [(doc, self._metadata_score(doc)) for doc in docs]

    def _metadata_score(self, doc: Document) -> float | None:
        raw = doc.metadata.get(self.score_key)
        return None if raw is None else self.score_function.convert(float(raw))

    def _to_scored(
        self, pairs: Sequence[tuple[Document, float | None]], *, needs_scores: bool
    ) -> list[ScoredDocument]:
        if needs_scores and any(score is None for _, score in pairs):
            raise ValueError(
                f"the mechanism selects documents by score, but {self.name} returned documents "
                f"without metadata[{self.score_key!r}]: pass vectorstore= with a score_function"
            )
        high = self.score_function.high
        return [
            to_scored_document(doc, high if score is None else score, unit_key=self.unit_key)
            for doc, score in pairs
        ]

    def bind(self, callbacks: CallbackManager | None, *, needs_scores: bool) -> Retriever:
        """A ``retriever(question, k)`` whose runs nest under ``callbacks``, documents hidden."""

        def retrieve(question: str, k: int) -> list[ScoredDocument]:
            run = None
            if callbacks is not None:
                run = callbacks.on_retriever_start(None, question, name=self.name)
            try:
                pairs = guarded(
                    "retrieval", self.name, lambda: run_sealed(self._search, question, k)
                )
            except PrivateDataError as err:
                if run is not None:
                    run.on_retriever_error(err)
                raise
            if run is not None:
                run.on_retriever_end([])
            return self._to_scored(pairs, needs_scores=needs_scores)

        return retrieve
