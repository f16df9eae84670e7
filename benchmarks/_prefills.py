"""The eager backend with each of its two prefills forced, for side-by-side timings.

A CPU session prefills row by row with one torch thread and with one batched forward
with more (``dprag_core.models.hf_cache.per_row_prefill``); these subclasses take one
of the two whatever the threads, with the same layout and the same decode steps.
Shared by ``prefill.py`` and ``cpu_answer.py`` (run as scripts from the repository root).
"""

from __future__ import annotations

import torch

from dprag_core.models.hf_cache import (
    DynamicBackend,
    prefill_padded,
    prefill_rows,
    with_closed_slot,
)


class RowsBackend(DynamicBackend):
    """The eager backend, each row prefilled alone (``prefill_rows``)."""

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ids, mask = with_closed_slot(ids, mask)
        self._mask = mask
        self._next_position = mask.sum(-1, keepdim=True)
        rows = prefill_rows(self._call, ids, mask, self._prefix)
        assert rows is not None, "a model whose cache holds keys and values only"
        logits, self._cache = rows
        return logits


class BatchedBackend(DynamicBackend):
    """The eager backend, one batched forward over the public layout (``prefill_padded``)."""

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ids, mask = with_closed_slot(ids, mask)
        self._mask = mask
        self._next_position = mask.sum(-1, keepdim=True)
        logits, self._cache = prefill_padded(self._call, ids, mask)
        return logits
