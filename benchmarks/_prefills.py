"""A third prefill of the eager backend, for side-by-side timings.

The eager backend prefills with one batched forward over the public width by
default and each row alone with ``prefill="rows"``
(``dprag_core.models.hf_cache.DynamicBackend``). :func:`prefill_rows_padded` is
each row alone at the public width (``timing.py --prefill padded-rows``, which
puts it in the place of ``hf_cache.prefill_rows``); imported by that script, run
from the repository root, and by ``tests/models/test_prefill_rows.py``.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from dprag_core.models.hf_cache import ModelCall, SharedPrefix


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
