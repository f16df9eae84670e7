"""The eager backend with each of its two prefills forced, for side-by-side timings.

A CPU session prefills row by row with one torch thread and with one batched forward
with more (``dprag_core.models.hf_cache.per_row_prefill``); these subclasses take one
of the two whatever the threads, with the same layout and the same decode steps.
Shared by ``prefill.py`` and ``cpu_answer.py`` (run as scripts from the repository root).
:func:`prefill_rows_padded` is a third prefill, each row alone at the public width
(``timing.py --prefill padded-rows``).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from dprag_core.models.hf_cache import (
    DynamicBackend,
    ModelCall,
    SharedPrefix,
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


def prefill_rows_padded(
    call: ModelCall, ids: torch.Tensor, mask: torch.Tensor, prefix: SharedPrefix | None = None
) -> tuple[torch.Tensor, DynamicCache]:
    """Each row prefilled alone at the public width: one [1, W] forward of its left-padded
    ids (positions from its own mask; ``prefix`` unused), the caches stacked into the
    public [B, W] layout. Every row's forward has the same shape whatever it holds, so the
    prefill's work is B forwards of W positions (the batched forward's work, in B calls).
    """
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    logits, caches = [], []
    for r in range(int(ids.shape[0])):
        cache = DynamicCache(config=call.model.config)
        logits.append(call(ids[r : r + 1], mask[r : r + 1], positions[r : r + 1], cache))
        caches.append(cache)
    batched = DynamicCache(config=call.model.config)
    with torch.inference_mode():
        for index in range(len(batched.layers)):
            keys, values = (
                torch.cat([getattr(c.layers[index], name) for c in caches])
                for name in ("keys", "values")
            )
            batched.update(keys, values, index)
    return torch.cat(logits), batched
