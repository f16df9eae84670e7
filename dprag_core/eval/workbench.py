"""The offline evaluation bench: the shipped reader LM and a FAISS index over a synthetic corpus.

Shared by ``dprag demo``, ``benchmarks/privacy_utility.py`` and
``benchmarks/attacks.py``: :func:`reader_path` is the reader LM shipped in
``dprag_core/assets/reader`` (loadable with ``AutoModelForCausalLM`` /
``AutoTokenizer``), :func:`load_models` loads any HF model as a
:class:`~dprag_core.models.hf.HFTokenModel` plus an
:class:`~dprag_core.models.hf.HFTextModel` sharing its weights, and
:class:`CorpusIndex` is an exact inner-product FAISS index over normalised
MiniLM embeddings, called as a retriever ``index(question, k)``.

>>> from dprag_core.eval.synthetic import make_corpus
>>> index = CorpusIndex.build(make_corpus(seed=0))  # doctest: +SKIP
>>> index("What treatment is recommended for Vevalitis?", 3)[0].score <= 1.0  # doctest: +SKIP
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_int

if TYPE_CHECKING:
    from dprag_core.eval.synthetic import SyntheticCorpus
    from dprag_core.models.hf import HFTextModel, HFTokenModel

__all__ = ["CorpusIndex", "load_models", "reader_path"]

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


def reader_path() -> Path:
    """Folder of the project's reader LM (``dprag_core/assets/reader``).

    >>> (reader_path() / "config.json").name
    'config.json'
    """
    return Path(__file__).resolve().parent.parent / "assets" / "reader"


def load_models(name_or_path: str | Path | None = None) -> tuple[HFTokenModel, HFTextModel]:
    """A token model and a text model sharing one set of weights (default: the reader).

    >>> token_model, text_model = load_models()  # doctest: +SKIP
    """
    from dprag_core.models.hf import HFTextModel, HFTokenModel

    token_model = HFTokenModel.from_pretrained(str(name_or_path or reader_path()))
    return token_model, HFTextModel.on(token_model)


class CorpusIndex:
    """A :class:`~dprag_core.retrieval.faiss_corpus.FaissCorpus` plus its query embedder.

    Exact cosine search (FAISS ``IndexFlatIP`` on normalised embeddings).
    ``index(question, k)`` returns the top-``k`` documents as
    :class:`~dprag_core.retrieval.documents.ScoredDocument` (best first; fewer when
    the corpus is smaller); ``index.above(question, tau)`` every document scoring
    above ``tau`` (FAISS range search). Each document is its own privacy unit.
    It honours k (``honours_k = True``), so every mechanism accepts it.
    """

    honours_k = True

    def __init__(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        embed: Embed,
        *,
        vectors: npt.NDArray[np.float32] | None = None,
    ) -> None:
        from dprag_core.retrieval.faiss_corpus import FaissCorpus

        if len(ids) != len(texts) or not ids:
            raise ValueError("ids and texts must be non-empty and of the same length")
        self.embed = embed
        vecs = np.asarray(embed(list(texts)) if vectors is None else vectors, dtype=np.float32)
        self.corpus = FaissCorpus(dim=int(vecs.shape[1]))
        self.corpus.add(list(ids), list(texts), vecs)

    @classmethod
    def build(cls, corpus: SyntheticCorpus, embed: Embed | None = None) -> CorpusIndex:
        """Index a synthetic corpus (default embedder: :class:`MiniLMEmbedder`)."""
        if embed is None:
            from dprag_core.eval.embeddings import MiniLMEmbedder

            embed = MiniLMEmbedder()
        return cls(corpus.ids(), corpus.texts(), embed)

    def __len__(self) -> int:
        return len(self.corpus)

    def __call__(self, question: str, k: int) -> list[ScoredDocument]:
        """The top-``k`` documents for ``question``, best first."""
        return self.corpus.search(self.embed([question])[0], positive_int("k", k))

    def above(self, question: str, tau: float) -> list[ScoredDocument]:
        """Every document scoring above ``tau``, best first."""
        return self.corpus.range_search(self.embed([question])[0], tau)

    def __repr__(self) -> str:
        return f"CorpusIndex(documents={len(self)})"
