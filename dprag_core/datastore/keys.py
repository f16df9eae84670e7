"""Datastore keys: sentence embeddings or an LM's next-token distribution.

kNN-Prompting (Xu et al. 2023) keys each demonstration by the language model's
next-token distribution at the end of its prompt. For SimHash (angular LSH) we
map a distribution ``q`` to ``sqrt(q)``: the cosine of two such vectors is the
Bhattacharyya coefficient of the distributions, so angular buckets group
similar distributions. Keys are public functions of one record each, so they
add no privacy cost; the DP guarantee comes from the noisy release.

>>> keys = embedding_keys(lambda texts: np.ones((len(texts), 3)), ["a", "b"])
>>> np.allclose(np.linalg.norm(keys, axis=1), 1.0)
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dprag_core.models.base import LogprobModel
from dprag_core.validation import positive_int

__all__ = ["embedding_keys", "token_distribution_keys"]

Embedder = Callable[[Sequence[str]], npt.ArrayLike]


def _normalise(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def embedding_keys(embed: Embedder, texts: Sequence[str]) -> npt.NDArray[np.float64]:
    """L2-normalised embeddings of ``texts`` from any batch embedding function."""
    if not texts:
        raise ValueError("texts must be a non-empty sequence")
    x = np.asarray(embed(list(texts)), dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != len(texts):
        raise ValueError(f"embed must return one vector per text, got shape {x.shape}")
    return _normalise(x)


def token_distribution_keys(
    model: LogprobModel, prompts: Sequence[str], *, batch_size: int = 32
) -> npt.NDArray[np.float64]:
    """kNN-Prompting keys: ``sqrt`` of the next-token distribution after each prompt."""
    if not callable(getattr(model, "prefill_logprobs", None)):
        raise TypeError(
            "model must be a LogprobModel (full next-token distributions), "
            f"got {type(model).__name__}"
        )
    if not prompts:
        raise ValueError("prompts must be a non-empty sequence")
    batch_size = positive_int("batch_size", batch_size)
    rows = []
    for start in range(0, len(prompts), batch_size):
        session = model.prefill_logprobs(list(prompts[start : start + batch_size]))
        rows.append(np.sqrt(np.exp(np.asarray(session.logprobs, dtype=np.float64))))
    return _normalise(np.concatenate(rows, axis=0))
