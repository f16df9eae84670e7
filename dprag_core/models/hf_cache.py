"""How the transformers engine calls a model: the cache argument, and the eager cache backend.

transformers renamed the forward argument that carries the KV cache:
``past_key_values=`` (every release up to the floor dprag declares, 5.17) became
``cache=`` (5.2x), and the old name warns (``FutureWarning``) that it goes away
in 5.40. :func:`cache_argument` reads which one a model's ``forward`` takes,
once per model, so that every call dprag makes (the eager backend here, the
static batches of :mod:`~dprag_core.models.hf_static`) uses the name the
installed transformers expects and the user's console stays free of the
warning.

>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> tiny = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
>>> cache_argument(LlamaForCausalLM(tiny)) in {"cache", "past_key_values"}
True
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cache_argument"]


def cache_argument(model: Any) -> str:
    """The name of the KV-cache argument of ``model.forward``: ``"cache"`` or ``"past_key_values"``.

    Read from the signature (transformers' deprecation decorator keeps the new
    function's signature): ``"cache"`` when ``forward`` takes it, the old name
    otherwise (transformers < 5.2x, and models with their own ``forward``).
    """
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
