"""Classify with a released DP SimHash datastore from LlamaIndex.

``DPDatastoreQueryEngine`` is a LlamaIndex query engine whose answer is the
predicted label; ``Response.metadata`` carries the summed noisy votes and the
release's (epsilon, delta). The datastore was released once; queries are
post-processing and cost no further privacy budget.

Example (``store`` from ``DPSimHashDatastore.release``, ``emb`` any BaseEmbedding)::

    engine = DPDatastoreQueryEngine(store=store, embed_model=emb, labels=["a", "b"])
    str(engine.query("some text"))  # the predicted label
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.query_engine import CustomQueryEngine
from pydantic import ConfigDict

from dprag_core.datastore import DPSimHashDatastore, embedding_keys
from dprag_core.validation import check_keywords
from llamaindex_dprag.responses import DPResponse

__all__ = ["DPDatastoreQueryEngine"]


class DPDatastoreQueryEngine(CustomQueryEngine):
    """A query engine that classifies the query text with a released DP datastore."""

    store: Any
    embed_model: BaseEmbedding
    labels: list[str]

    model_config = ConfigDict(arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
        check_keywords(type(self).__name__, data, type(self).model_fields)
        super().__init__(**data)
        if not isinstance(self.store, DPSimHashDatastore) or self.store.guarantee is None:
            raise ValueError("store must be a DP release (DPSimHashDatastore.release)")
        if len(self.labels) != self.store.num_classes:
            raise ValueError(f"labels must name all {self.store.num_classes} classes of the store")

    def classify(self, texts: list[str]) -> list[str]:
        """Labels of many texts (one embedding batch, one vectorised lookup)."""
        keys = embedding_keys(
            lambda t: np.asarray(self.embed_model.get_text_embedding_batch(list(t))), texts
        )
        return [self.labels[int(i)] for i in self.store.predict(keys)]

    def custom_query(self, query_str: str) -> DPResponse:
        """Answer with the predicted label; metadata holds scores and the guarantee."""
        keys = embedding_keys(
            lambda t: np.asarray([self.embed_model.get_query_embedding(t[0])]), [query_str]
        )
        scores = self.store.class_scores(keys)[0]
        guarantee = self.store.guarantee
        return DPResponse(
            response=self.labels[int(scores.argmax())],
            source_nodes=[],
            metadata={
                "scores": scores.tolist(),
                "epsilon": guarantee.epsilon,
                "delta": guarantee.delta,
                "mechanism": "DPSimHashDatastore",
            },
        )
