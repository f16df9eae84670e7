"""How the transformers engine calls a model, and its eager cache backend.

**The cache argument.** transformers renamed the forward argument that carries
the KV cache: ``past_key_values=`` (every release up to the floor dprag
declares, 5.17) became ``cache=`` (5.2x), and the old name warns
(``FutureWarning``) that it goes away in 5.40. :func:`cache_argument` reads
which one a model's ``forward`` takes, once per model, so that every call dprag
makes (:class:`ModelCall` here, the static batches of
:mod:`~dprag_core.models.hf_static`) uses the name the installed transformers
expects and the user's console stays free of the warning.

**Cache backends.** A session of :class:`~dprag_core.models.hf.HFTokenModel`
is one object over a small backend that owns the cache (:class:`CacheBackend`):
:class:`DynamicBackend` here (engine ``"eager"``: a ``DynamicCache`` grown by
concatenation) and :class:`~dprag_core.models.hf_static.StaticBackend` (engines
``"static"``, ``"cuda_graphs"``, ``"compiled"``: pooled static caches). A
backend returns the model's raw last-position logits (every logit row); the
session cuts them to the real vocabulary, in one place.

**Prefill.** Sessions are laid out in a public shape, B rows left-padded to
``prompt_width`` (:mod:`~dprag_core.models.hf`, *batch invariance*).
:class:`DynamicBackend` fills it with one batched forward over that shape
(:func:`prefill_padded`), as the static engines do, on every device and thread
count: the prefill computes B x ``prompt_width`` positions whatever the rows
hold, so its time does not follow the retrieved documents. The opt-in
``prefill="rows"`` of :class:`~dprag_core.models.hf.HFTokenModel` prefills each
row alone instead (:func:`prefill_rows`: a function of that row's prompt only,
the tokens it shares with the public :class:`SharedPrefix` computed once) and
places its keys and values right-aligned in the padded cache, which the decode
steps then extend batched in the public shape: less work on one CPU thread
(``benchmarks/prefill.py``, ``benchmarks/cpu_answer.py``), and a time that
follows each row's token count up to the public width
(``benchmarks/timing.py --prefill rows``).

**One closed slot.** The eager layout has one slot more than ``prompt_width``,
in front, closed for every row (:func:`with_closed_slot`). transformers skips
the attention mask when a forward's mask is all ones, and SDPA's unmasked and
masked kernels round differently: without that slot, when every row reached
``prompt_width`` (DPVote and VoteRAG have no short public row) a decode step
ran unmasked, and one voter's shorter prompt switched the whole batch to the
masked kernel, moving the other rows' logits by 1e-5 (SmolLM2). With it every
forward is masked, so the kernel never depends on the rows. (The static
engines build their masks themselves and always pass them.)

>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> tiny = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)
>>> cache_argument(LlamaForCausalLM(tiny)) in {"cache", "past_key_values"}
True
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

__all__ = [
    "CacheBackend",
    "DynamicBackend",
    "ModelCall",
    "SharedPrefix",
    "cache_argument",
    "check_rewindable",
    "prefill_padded",
    "prefill_rows",
    "with_closed_slot",
]


def cache_argument(model: Any) -> str:
    """The name of the KV-cache argument of ``model.forward``: ``"cache"`` or ``"past_key_values"``.

    Read from the signature (transformers' deprecation decorator keeps the new
    function's signature): ``"cache"`` when ``forward`` takes it, the old name
    otherwise (transformers < 5.2x, and models with their own ``forward``).
    """
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class ModelCall:
    """One cached forward of a model, its argument names read once (:func:`cache_argument`,
    ``logits_to_keep`` when the model takes it).

    >>> ModelCall(model)(ids, mask, positions, DynamicCache(config=model.config))  # doctest: +SKIP
    tensor([[...]])
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        self._keep = "logits_to_keep" in params
        self._cache = cache_argument(model)

    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """The last position's logits, [B, logit rows], on the model's device."""
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
            self._cache: cache,
        }
        if self._keep:
            kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            logits: torch.Tensor = self.model(**kwargs).logits[:, -1]
        return logits


#: Cache layers :func:`prefill_rows` lays out (keys and values of the last tokens, nothing else).
ALIGNABLE = (DynamicLayer, DynamicSlidingWindowLayer)


class SharedPrefix:
    """Public leading tokens whose keys and values :func:`prefill_rows` computes once.

    ``ids`` are public (the chat template's head and the text a prompt template
    starts with, :meth:`~dprag_core.models.hf.HFTokenModel.shared_prefix`). A row
    whose first j tokens are ``ids[:j]`` takes those j positions' keys and values
    from one forward of ``ids`` alone (computed at the first use and kept: causal
    attention makes them the same for any continuation) and computes its other
    tokens only. j is the length of the common start of that row and ``ids`` (at
    most the row's length minus one, so a forward is left to give its logits): a
    function of the row's own prompt and public tokens, never of another row, so
    each row stays a function of its own prompt.

    >>> prefix = SharedPrefix(None, [1, 2, 3])
    >>> prefix.shared([1, 2, 9, 9]), prefix.shared([1, 2, 3]), prefix.shared([7, 1])
    (2, 2, 0)
    """

    def __init__(self, call: ModelCall | None, ids: list[int]) -> None:
        self._call = call
        self.ids = list(ids)
        self._layers: list[tuple[Any, Any]] | None = None  # each layer's keys and values

    def shared(self, row: list[int]) -> int:
        """How many leading tokens of ``row`` are the prefix's (at most ``len(row) - 1``)."""
        j = 0
        for mine, public in zip(row[: len(row) - 1], self.ids, strict=False):
            if mine != public:
                break
            j += 1
        return j

    def cache(self, length: int, device: torch.device) -> DynamicCache:
        """A new cache holding the keys and values of the prefix's first ``length`` tokens."""
        assert self._call is not None, "a prefix built with a model call"
        config = self._call.model.config
        if self._layers is None:
            full = DynamicCache(config=config)
            ids = torch.tensor([self.ids], dtype=torch.long, device=device)
            positions = torch.arange(len(self.ids), device=device).view(1, -1)
            self._call(ids, torch.ones_like(ids), positions, full)
            layers = [layer for layer in full.layers if isinstance(layer, ALIGNABLE)]
            self._layers = [(layer.keys, layer.values) for layer in layers]
        cache = DynamicCache(config=config)
        with torch.inference_mode():
            for index, (keys, values) in enumerate(self._layers):
                cache.update(keys[:, :, :length], values[:, :, :length], index)
        return cache


def prefill_rows(
    call: ModelCall, ids: torch.Tensor, mask: torch.Tensor, prefix: SharedPrefix | None = None
) -> tuple[torch.Tensor, DynamicCache] | None:
    """Each row's prompt prefilled alone, laid out as the batched prefill of the [B, W]
    left-padded ``ids`` (``mask``: real tokens) lays it out; None for a model whose cache
    holds more than keys and values (:data:`ALIGNABLE`: recurrent or indexed layers).

    Row r is one [1, n_r - j_r] forward of its own tokens (no padding, positions
    j_r..n_r - 1), the first j_r positions' keys and values taken from ``prefix``
    (:meth:`SharedPrefix.shared`: j_r = 0 without one): its cache and first
    logits depend on that row's prompt and public tokens only, and the prefill
    computes the rows' real tokens past the public prefix, not B x W positions:
    its work, and so its time, follows the rows' token counts (up to W).
    Each layer's keys and values are then placed right-aligned in [B, heads, W,
    dim] (zeros in the padded slots, which the mask closes), the layout and
    positions of the batched left-padded prefill: decoding goes on batched in
    the public shape. Returns the [B, logit rows] first logits and the cache.

    >>> logits, cache = prefill_rows(ModelCall(model), ids, mask)  # doctest: +SKIP
    """
    width = int(ids.shape[1])
    config = call.model.config
    if not all(type(layer) in ALIGNABLE for layer in DynamicCache(config=config).layers):
        return None
    logits, caches = [], []
    for r, n in enumerate(mask.sum(-1).tolist()):
        own = ids[r : r + 1, width - n :]
        j = prefix.shared(own[0].tolist()) if prefix is not None else 0
        cache = prefix.cache(j, ids.device) if prefix and j else DynamicCache(config=config)
        positions = torch.arange(j, n, device=ids.device).view(1, n - j)
        logits.append(call(own[:, j:], mask[r : r + 1, width - n :], positions, cache))
        caches.append(cache)
    batched = DynamicCache(config=config)
    with torch.inference_mode():
        for index in range(len(batched.layers)):
            keys, values = (
                _right_aligned([getattr(c.layers[index], name) for c in caches], width)
                for name in ("keys", "values")
            )
            batched.update(keys, values, index)
        return torch.cat(logits), batched


def prefill_padded(
    call: ModelCall, ids: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, DynamicCache]:
    """One batched forward over the [B, W] left-padded ``ids`` (positions from the
    cumulative ``mask``): [B, logit rows] first logits and the cache. Its one forward
    has the public shape [B, W] whatever the rows hold (B x W positions, where
    :func:`prefill_rows` computes the rows' real tokens only), so its work does not
    follow the rows' token counts.

    >>> logits, cache = prefill_padded(ModelCall(model), ids, mask)  # doctest: +SKIP
    """
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache(config=call.model.config)
    return call(ids, mask, positions, cache), cache


def _right_aligned(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """[1, heads, n_r, dim] tensors stacked as [B, heads, width, dim], each at the right end."""
    first = parts[0]
    out = first.new_zeros((len(parts), first.shape[1], width, first.shape[3]))
    for r, part in enumerate(parts):
        out[r, :, width - part.shape[2] :] = part[0]
    return out


def with_closed_slot(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` and ``mask`` [B, W] with one more slot in front, closed for every row.

    transformers drops the attention mask of a forward whose 2D mask is all ones
    (SDPA's unmasked kernel instead of the masked one): with every row at the full
    width, whether it did depended on whether *some other* row was shorter, and the
    two kernels round differently (SmolLM2: a row's logits moved by 1e-5). With a
    slot that no row ever attends to, the mask is never all ones and every forward
    takes the masked kernel, whatever the rows hold (module docstring).

    >>> ids, mask = with_closed_slot(torch.tensor([[5, 6]]), torch.tensor([[1, 1]]))
    >>> ids.tolist(), mask.tolist()
    ([[0, 5, 6]], [[0, 1, 1]])
    """
    closed = torch.zeros_like(ids[:, :1])
    return torch.cat([closed, ids], dim=1), torch.cat([torch.zeros_like(mask[:, :1]), mask], dim=1)


def check_rewindable(cache: DynamicCache) -> None:
    """Refuse (ValueError) an eager cache a lookahead cannot cut back: every layer must be
    full attention (``DynamicLayer``; a sliding window or a recurrent state cannot be
    rewound by cutting its tensors)."""
    kinds = {type(layer) for layer in cache.layers}
    if kinds != {DynamicLayer}:
        names = sorted(kind.__name__ for kind in kinds)
        raise ValueError(
            "unit='word' (lookahead) needs a model whose cache layers are all full attention "
            f"(transformers DynamicLayer), this one has {names}: use unit='token'"
        )


class CacheBackend(Protocol):
    """The cache of one session's B rows; every method returns raw last-position logits.

    ``append`` writes w tokens per row in one forward; ``save``/``restore``
    bracket a lookahead (the state it restores is exactly the saved one);
    ``reserve`` makes room for that many decode steps first, and ``persistent``
    returns logits that stay valid across later steps (a CUDA graph's output
    buffer is overwritten by the next replay).
    """

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Fill the cache with the [B, W] left-padded ``ids`` (``mask``: real tokens)."""
        ...

    def append(self, ids: torch.Tensor) -> torch.Tensor:
        """Append [B, w] tokens (w >= 1) in one forward."""
        ...

    def reserve(self, steps: int, logits: torch.Tensor) -> torch.Tensor:
        """Make room for ``steps`` decode steps; ``logits`` (kept valid) back."""
        ...

    def persistent(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` as a tensor no later step overwrites."""
        ...

    def save(self) -> Any:
        """The state :meth:`restore` goes back to."""
        ...

    def restore(self, saved: Any) -> None:
        """Go back to a state :meth:`save` returned, earlier in the lookahead under way or
        just before it (the slots written since are dropped)."""
        ...


class DynamicBackend:
    """Engine ``"eager"``: a ``DynamicCache`` grown by concatenation, HF eager forwards.

    Its prefill is one batched forward over the public B x W layout
    (:func:`prefill_padded`); with ``rows=True`` (``prefill="rows"`` of
    :class:`~dprag_core.models.hf.HFTokenModel`) each row is prefilled alone
    (:func:`prefill_rows`), the tokens it shares with ``prefix`` computed once, and
    the prefill's time then follows the rows' token counts. A model whose cache
    holds more than keys and values (:data:`ALIGNABLE`) keeps the batched forward.

    >>> backend = DynamicBackend(ModelCall(model), device)  # doctest: +SKIP
    >>> by_rows = DynamicBackend(ModelCall(model), device, rows=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        call: ModelCall,
        device: torch.device,
        *,
        rows: bool = False,
        prefix: SharedPrefix | None = None,
    ) -> None:
        self._call, self._device, self._rows, self._prefix = call, device, rows, prefix

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Fill a new cache: one batched forward over the public B x W layout
        (:func:`prefill_padded`), or each row alone with ``rows`` (:func:`prefill_rows`;
        class docstring). The layout gets one slot in front that no row attends to
        (:func:`with_closed_slot`). Row r's next position is n_r."""
        ids, mask = with_closed_slot(ids, mask)
        self._mask = mask
        self._next_position = mask.sum(-1, keepdim=True)
        rows = prefill_rows(self._call, ids, mask, self._prefix) if self._rows else None
        logits, self._cache = rows or prefill_padded(self._call, ids, mask)
        return logits

    def append(self, ids: torch.Tensor) -> torch.Tensor:
        """One [B, w] forward at the next w positions of every row."""
        rows, width = int(ids.shape[0]), int(ids.shape[1])
        ones = torch.ones((rows, width), dtype=self._mask.dtype, device=self._device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        positions = self._next_position + torch.arange(width, device=self._device)
        self._next_position = positions[:, -1:] + 1
        return self._call(ids, self._mask, positions, self._cache)

    def reserve(self, steps: int, logits: torch.Tensor) -> torch.Tensor:
        """Nothing to reserve: the cache grows by concatenation."""
        return logits

    def persistent(self, logits: torch.Tensor) -> torch.Tensor:
        """Eager logits are fresh tensors: kept as they are."""
        return logits

    def save(self) -> Any:
        """The mask, positions and every layer's key and value tensors: references only,
        as each step concatenates new tensors and never writes to the old ones."""
        check_rewindable(self._cache)
        layers = [(layer.keys, layer.values) for layer in self._layers()]
        return self._mask, self._next_position, layers

    def restore(self, saved: Any) -> None:
        """Put the saved tensors back (no copy)."""
        self._mask, self._next_position, layers = saved
        for layer, (keys, values) in zip(self._layers(), layers, strict=True):
            layer.keys, layer.values = keys, values

    def _layers(self) -> list[DynamicLayer]:
        """The cache's layers, all full attention (``check_rewindable``)."""
        return [layer for layer in self._cache.layers if isinstance(layer, DynamicLayer)]
