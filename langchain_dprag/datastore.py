"""Classify with a released DP SimHash datastore from LangChain (a Runnable).

The datastore was released once with a fixed epsilon; queries are
post-processing and cost no further privacy budget, so this Runnable needs no
accountant. It embeds the input with any LangChain ``Embeddings`` and returns
the predicted label and the summed noisy votes.

Example (``store`` from ``DPSimHashDatastore.release``, ``emb`` any Embeddings)::

    classifier = DPDatastoreClassifier(store=store, embeddings=emb, labels=["a", "b"])
    classifier.invoke("some text")
    # {'label': 'a', 'scores': [12.0, -3.0], 'epsilon': 4.0, 'delta': 0.0}
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, model_validator
from typing_extensions import Self

from dprag_core.datastore import DPSimHashDatastore, embedding_keys
from langchain_dprag._strict import KnownFields

__all__ = ["DPDatastoreClassifier"]


class DPDatastoreClassifier(KnownFields, RunnableSerializable[str, dict[str, Any]]):
    """A Runnable: text -> ``{"label", "scores", "epsilon", "delta"}`` from a released store."""

    store: DPSimHashDatastore
    embeddings: Embeddings
    labels: list[str]

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.store.guarantee is None:
            raise ValueError(
                "store must be a DP release (DPSimHashDatastore.release), not non_private"
            )
        if len(self.labels) != self.store.num_classes:
            raise ValueError(f"labels must name all {self.store.num_classes} classes of the store")
        return self

    def _classify(self, texts: list[str]) -> list[dict[str, Any]]:
        keys = embedding_keys(lambda t: np.asarray(self.embeddings.embed_documents(list(t))), texts)
        scores = self.store.class_scores(keys)
        guarantee = self.store.guarantee
        assert guarantee is not None
        return [
            {
                "label": self.labels[int(row.argmax())],
                "scores": row.tolist(),
                "epsilon": guarantee.epsilon,
                "delta": guarantee.delta,
            }
            for row in scores
        ]

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Classify one text."""
        return self._call_with_config(lambda text: self._classify([text])[0], input, config)

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Classify many texts with one embedding call and one vectorised lookup."""
        if not inputs:
            return []
        return self._classify(list(inputs))
