"""Static KV caches for the transformers engine, with CUDA-graph replay of decode steps.

The default engine (:class:`~dprag_core.models.hf_cache.DynamicBackend`) grows a
``DynamicCache`` by one slot per token and runs each step through HF eager: on a
GPU most of a step is Python and kernel-launch overhead, not the model. This
module keeps each batch in a *static* cache of ``L`` slots and runs a decode step
as one fixed sequence of kernels over fixed buffers, so on CUDA it is captured
once as a CUDA graph and replayed per token (engine ``"cuda_graphs"``); the same
code runs eagerly anywhere (engine ``"static"``, the one the CPU tests exercise).
:class:`StaticBackend` is the cache backend of those engines' sessions
(:class:`~dprag_core.models.hf_cache.CacheBackend`).

Buffers of one :class:`StaticBatch` (B rows, L slots):

- the cache: HF's ``StaticCache`` (``[B, kv heads, L, head dim]`` per layer) and
  its device counter of filled slots (``cumulative_length``);
- ``mask`` [B, 1, 1, L]: an additive attention bias in the model's dtype, 0 on
  the slots each row attends to and the dtype's minimum elsewhere (a ready bias,
  so SDPA converts nothing per layer). Prefill opens the row's real prompt
  tokens; each decode step first opens the slot it writes. Left padding is never
  attended to, so rows do not see each other's lengths;
- ``ids`` [B, 1] (the tokens fed next) and ``positions`` [B, 1] (each row's
  position: the prompt length without padding, then +1 per step).

Attention reads all L slots of the cache, with the unfilled ones masked out, so
``L`` is the prompt width plus ``HEADROOM`` rounded up to ``BUCKET`` slots (the
attention reads at most ``BUCKET`` unused slots) and a batch that fills up moves
to a larger one (:meth:`StaticBatch.copy_into`, by :class:`StaticBackend`).

Several tokens per row (a chosen word of word-level voting) are written in one
forward (:meth:`StaticBatch.write`): a [B, w] step over the same buffers, run
eagerly (the captured graph is one token wide), with a [B, 1, w, L] bias that
opens each new slot to itself and the ones after it. Batches are pooled by (B, L) and
reused: allocating and capturing is paid once per shape, not per query.

Padding query positions in the prefill attend to themselves only (a fully masked
row would give NaN, and NaN in a cache slot poisons every row that reads it,
even with weight 0).

>>> pool = StaticPool(model, graphs=False)  # doctest: +SKIP
>>> batch = pool.acquire(rows=2, width=7)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, cast

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from dprag_core.models.hf_cache import cache_argument

__all__ = [
    "BUCKET",
    "HEADROOM",
    "StaticBackend",
    "StaticBatch",
    "StaticPool",
    "check_static_model",
    "compile_regions",
]

#: Cache lengths are multiples of this many slots.
BUCKET = 64
#: Slots reserved after the prompt before a batch must grow.
HEADROOM = 64
#: Free batches kept for reuse (least recently used dropped first).
MAX_FREE = 4
#: Class-name endings of the blocks :func:`compile_regions` compiles.
REGIONS = ("RMSNorm", "MLP")


def check_static_model(model: Any, engine: str, *, cuda: bool) -> None:
    """Refuse models the static engine cannot run exactly (ValueError, naming ``engine``).

    ``cuda``: the engine replays CUDA graphs, so the model must be on a CUDA device.

    The decode mask is a ready [B, 1, 1, L] attention bias, which HF passes as is
    to SDPA attention only; sliding-window or recurrent layers would need their own
    masks and caches.
    """
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "sdpa":
        raise ValueError(
            f"engine={engine!r} needs attn_implementation='sdpa', the model uses {impl!r}"
        )
    cache = StaticCache(config=model.config, max_cache_len=1)
    if not all(type(layer) is StaticLayer for layer in cache.layers):
        raise ValueError(
            f"engine={engine!r} supports full-attention decoders only (no sliding-window "
            "or recurrent layers); use engine='eager'"
        )
    if cuda and next(model.parameters()).device.type != "cuda":
        raise ValueError(f"engine={engine!r} needs the model on a CUDA device")


def compile_regions(model: Any) -> int:
    """Compile the model's normalisation and MLP blocks in place; return how many.

    A decode step in HF eager is some 40 small kernels per layer besides the
    matrix products; ``torch.compile`` of each block whose class name ends with
    one of ``REGIONS`` (``LlamaRMSNorm``, ``Qwen2MLP``, ...) fuses the
    element-wise ones (on an 8B Llama: 11.0 -> 9.3 ms per step). Attention stays
    HF's: compiling it would make HF repeat the KV heads instead of packing the
    query's. ``nn.Module.compile`` keeps the modules, their parameters and
    state-dict keys; their calls are compiled, the application's own calls too.
    Blocks already compiled are left as they are.
    """
    count = 0
    for module in model.modules():
        if type(module).__name__.endswith(REGIONS) and module._compiled_call_impl is None:
            module.compile(dynamic=False)
            count += 1
    return count


def cache_length(width: int) -> int:
    """Slots for ``width`` filled ones plus HEADROOM, rounded up to BUCKET.

    >>> cache_length(270), cache_length(0)
    (384, 64)
    """
    return -(-(width + HEADROOM) // BUCKET) * BUCKET


class StaticBatch:
    """Static buffers for B rows of L slots, and (with graphs) the captured decode step."""

    def __init__(self, model: Any, rows: int, length: int, *, graphs: bool) -> None:
        config = model.config.get_text_config(decoder=True)
        param = next(model.parameters())
        device = param.device
        self.model, self.rows, self.length = model, rows, length
        self.cache_kwarg = cache_argument(model)
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self.cache = StaticCache(config=model.config, max_cache_len=length)
        with torch.inference_mode():  # every buffer an inference tensor, whoever asks
            self.cache.early_initialization(rows, heads, head_dim, param.dtype, device)
            self.closed = torch.finfo(param.dtype).min
            self.mask = torch.full(
                (rows, 1, 1, length), self.closed, dtype=param.dtype, device=device
            )
            self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
            self.positions = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.layers = [cast(StaticLayer, layer) for layer in self.cache.layers]
        self.filled: torch.Tensor = self.layers[0].cumulative_length  # slots filled, on device
        self.logits: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        if graphs:
            self._capture()
        self.reset()

    def reset(self) -> None:
        """Empty the batch (cache, counters, mask) in place: buffer addresses are kept."""
        with torch.inference_mode():
            self.cache.reset()  # type: ignore[no-untyped-call]
            self.mask.fill_(self.closed)

    def _decode_body(self) -> torch.Tensor:
        """One decode step on the buffers: attend to the new slot, forward, advance positions."""
        self.mask.index_fill_(3, self.filled.view(1), 0.0)
        out = self.model(
            input_ids=self.ids,
            attention_mask=self.mask,
            position_ids=self.positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_kwarg: self.cache},
        )
        self.positions.add_(1)
        logits: torch.Tensor = out.logits[:, -1]
        return logits

    def _capture(self) -> None:
        """Warm up on a side stream, then capture one decode step (on empty buffers)."""
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for _ in range(2):
                self._decode_body()
        torch.cuda.current_stream().wait_stream(stream)
        self.reset()
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.logits = self._decode_body()
        self.graph = graph

    def prefill(self, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Fill slots 0..W-1 with left-padded prompts; return the last position's logits.

        ``ids`` and ``real`` are [B, W]; ``real`` marks the prompt tokens (not padding).
        """
        width = int(ids.shape[1])
        device = ids.device
        slots = torch.arange(self.length, device=device)
        query = torch.arange(width, device=device)
        causal = slots[None, :] <= query[:, None]  # [W, L]
        own = slots[None, :] == query[:, None]  # padding queries attend to themselves
        keep = torch.zeros((self.rows, self.length), dtype=torch.bool, device=device)
        keep[:, :width] = real.bool()
        allowed = (causal[None] & keep[:, None, :]) | own[None]
        bias = torch.zeros((), dtype=self.mask.dtype, device=device)
        prefill_mask = torch.where(allowed, bias, self.closed)
        positions = (real.cumsum(-1) - 1).clamp_min(0)
        with torch.inference_mode():
            out = self.model(
                input_ids=ids,
                attention_mask=prefill_mask[:, None],
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self.cache_kwarg: self.cache},
            )
            self.mask[:, 0, 0, :].copy_(torch.where(keep, bias, self.closed))
            self.positions.copy_(positions[:, -1:] + 1)
        logits: torch.Tensor = out.logits[:, -1]
        return logits

    def decode(self, ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row (``ids`` [B, 1]); return the next logits.

        With a graph they are its output buffer: read them before the next step.
        """
        with torch.inference_mode():
            self.ids.copy_(ids)
            if self.graph is None:
                return self._decode_body()
            self.graph.replay()
        assert self.logits is not None
        return self.logits

    def write(self, ids: torch.Tensor) -> torch.Tensor:
        """Append w tokens per row (``ids`` [B, w]) in one forward; return the last logits.

        The w slots after the filled ones are written and opened: query i attends
        to what the row attended to before and to new slots 0..i (causal). Run
        eagerly on the batch's buffers, in place (a CUDA graph replays them next).
        """
        width = int(ids.shape[1])
        device = ids.device
        with torch.inference_mode():
            start = self.filled.view(1)
            slots = torch.arange(self.length, device=device)
            new = slots[None, :] - start  # [1, L]: index of each slot among the new ones
            causal = (new >= 0) & (new <= torch.arange(width, device=device)[:, None])  # [w, L]
            bias = self.mask.expand(self.rows, 1, width, self.length)
            step_mask = bias.masked_fill(causal[None, None], 0.0)
            positions = self.positions + torch.arange(width, device=device)
            out = self.model(
                input_ids=ids,
                attention_mask=step_mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self.cache_kwarg: self.cache},
            )
            self.mask.copy_(step_mask[:, :, -1:, :])
            self.positions.add_(width)
        logits: torch.Tensor = out.logits[:, -1]
        return logits

    def rewind(self, filled: int, positions: torch.Tensor, *, start: int) -> None:
        """Go to ``filled`` slots and the [B, 1] ``positions`` they had (no host sync).

        Every layer's slot counter is set to ``filled``; the slots past the prompt's
        ``start`` up to it are open (decode and write steps open their slots for
        every row) and the slots from ``filled`` on are closed, as they were then,
        so keys and values written there since are never attended to, and the next
        steps overwrite them. In place: the buffers a CUDA graph replays keep their
        addresses.
        """
        with torch.inference_mode():
            for layer in self.layers:
                layer.cumulative_length.fill_(filled)
            self.mask[..., start:filled].fill_(0.0)
            self.mask[..., filled:].fill_(self.closed)
            self.positions.copy_(positions)

    def copy_into(self, other: StaticBatch) -> None:
        """Move this batch's contents into a longer ``other`` (same rows)."""
        n = self.length
        with torch.inference_mode():
            for src, dst in zip(self.layers, other.layers, strict=True):
                for old, new in ((src.keys, dst.keys), (src.values, dst.values)):
                    assert old is not None and new is not None  # initialised when built
                    new[:, :, :n].copy_(old)
                dst.cumulative_length.copy_(src.cumulative_length)
            other.mask[..., :n].copy_(self.mask)
            other.positions.copy_(self.positions)


class StaticPool:
    """Static batches of one model, pooled by (rows, length); thread-safe.

    A batch is held by one session at a time (:meth:`acquire` / :meth:`release`);
    a released batch is reset and kept for the next session of its shape (at most
    ``MAX_FREE`` kept, least recently used dropped first), so its CUDA graph is
    captured once.
    """

    def __init__(self, model: Any, *, graphs: bool) -> None:
        self.model, self.graphs = model, graphs
        self._free: OrderedDict[tuple[int, int], list[StaticBatch]] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, rows: int, length: int) -> StaticBatch:
        """A reset batch of ``rows`` x ``length`` slots, reused when one is free."""
        key = (rows, length)
        with self._lock:
            free = self._free.get(key)
            if free:
                batch = free.pop()
                if not free:
                    del self._free[key]
                return batch
        return StaticBatch(self.model, rows, length, graphs=self.graphs)

    def release(self, batch: StaticBatch) -> None:
        """Return ``batch`` to the pool (reset; the oldest free batches dropped past MAX_FREE)."""
        batch.reset()
        key = (batch.rows, batch.length)
        with self._lock:
            self._free.setdefault(key, []).append(batch)
            self._free.move_to_end(key)
            while sum(len(v) for v in self._free.values()) > MAX_FREE:
                oldest = next(iter(self._free))
                self._free[oldest].pop(0)
                if not self._free[oldest]:
                    del self._free[oldest]


class StaticBackend:
    """The cache backend of the static engines: one pooled :class:`StaticBatch` at a time.

    The filled count is kept on the host (no sync per step); a batch that is full
    moves to a longer one from the pool. The batch goes back to the pool when the
    backend (its session) is garbage-collected. With a CUDA graph the logits of a
    one-token step are the graph's output buffer: :meth:`persistent` copies them.

    >>> backend = StaticBackend(StaticPool(model, graphs=False))  # doctest: +SKIP
    """

    def __init__(self, pool: StaticPool) -> None:
        self.pool = pool

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Acquire a batch for the prompt width and fill it."""
        rows, width = int(ids.shape[0]), int(ids.shape[1])
        self.width = width  # the prompt's slots; every slot from here on is open to every row
        self.batch = self.pool.acquire(rows, cache_length(width))
        self._release = weakref.finalize(self, self.pool.release, self.batch)
        self.free_slots = self.batch.length - width  # counted here: no host sync per step
        return self.batch.prefill(ids, mask)

    def append(self, ids: torch.Tensor) -> torch.Tensor:
        """One token per row: the decode step (replayed as a graph); more: one forward."""
        width = int(ids.shape[1])
        while self.free_slots < width:
            self._grow()
        self.free_slots -= width
        if width == 1:
            return self.batch.decode(ids)
        return self.batch.write(ids)

    def persistent(self, logits: torch.Tensor) -> torch.Tensor:
        """A copy when ``logits`` may be the graph's output buffer, else ``logits``."""
        if self.batch.graph is None:
            return logits
        with torch.inference_mode():
            return logits.clone()

    def reserve(self, steps: int, logits: torch.Tensor) -> torch.Tensor:
        """Grow before a lookahead that could, so that whether the batch grows depends on
        the public ``n`` only, never on where the rows' words end (which depends on every
        row's documents): a grown batch rounds differently in the last bits."""
        if self.free_slots >= steps:
            return logits
        logits = self.persistent(logits)  # the output buffer goes back to the pool
        while self.free_slots < steps:
            self._grow()
        return logits

    def save(self) -> Any:
        """The filled count (known on the host: no sync) and a copy of the positions [B, 1]."""
        with torch.inference_mode():
            return self.batch.length - self.free_slots, self.batch.positions.clone()

    def restore(self, saved: Any) -> None:
        """Put the saved state back on the current batch (no cache copy)."""
        filled, positions = saved
        self.batch.rewind(filled, positions, start=self.width)
        self.free_slots = self.batch.length - filled

    def _grow(self) -> None:
        old = self.batch
        new = self.pool.acquire(old.rows, cache_length(old.length))
        old.copy_into(new)
        self._release.detach()
        self.pool.release(old)
        self.batch = new
        self._release = weakref.finalize(self, self.pool.release, new)
        self.free_slots += new.length - old.length
