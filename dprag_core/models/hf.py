"""The transformers backend: a KV-cached batched token engine and greedy text generation.

:class:`HFTokenModel` is the hot path of the token-level DP mechanisms (DESIGN §6):
one batched prefill of B prompts (left padding, attention mask, position ids from
the cumulative mask, a persistent ``DynamicCache``), then one ``[B, 1]`` forward per
generated token, appending the *same* token to every row. It never calls
``generate()`` and applies no logits processor or sampling warper.

What crosses from the model's device to the host is only what the mechanism
reads: :meth:`HFTokenSession.greedy` is an argmax on the device and copies B
integers; :attr:`HFTokenSession.logprobs` (the exact float32 log-softmax of the
logits, for DP-ICL and kNN-Prompting keys) copies [B, V] and is computed only
when read. On a GPU with V = 128k the difference is most of the cost of a step.

Padded vocabularies: many checkpoints have more logit rows than the tokenizer has
tokens (the embedding is padded to a multiple of 64). Those rows are not tokens:
``vocab_size`` is the number of real tokens, and the greedy token, the
log-probabilities (normalised over the real tokens) and every mechanism's domain
stop there, so a padded row can never be voted for or emitted.

torch and transformers are imported only here; ``import dprag_core.models`` stays
light.

>>> model = HFTokenModel.from_pretrained("path/to/model")  # doctest: +SKIP
>>> session = model.prefill(["Question: who treats headache?\\nAnswer:"])  # doctest: +SKIP
>>> token = int(session.greedy()[0])  # doctest: +SKIP
>>> session.step(token)  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer

from dprag_core.models.base import StopRule
from dprag_core.models.codec import TokenizerCodec, check_token_ids, special_tokens
from dprag_core.models.hf_cache import cache_argument
from dprag_core.models.hf_static import (
    StaticPool,
    cache_length,
    check_static_model,
    compile_regions,
)
from dprag_core.validation import positive_int

__all__ = [
    "Engine",
    "HFStaticSession",
    "HFTextModel",
    "HFTokenModel",
    "HFTokenSession",
    "check_rewindable",
]

DType = Literal["float32", "bfloat16"]
#: ``"eager"``: DynamicCache, HF eager per step (the default; best on CPU).
#: ``"static"``: pooled static KV caches, eager steps. ``"cuda_graphs"``: static
#: caches with each decode step replayed as a CUDA graph (GPU only). ``"compiled"``:
#: ``"cuda_graphs"`` with the model's norm and MLP blocks compiled in place
#: (:func:`~dprag_core.models.hf_static.compile_regions`; GPU only, the fastest).
Engine = Literal["eager", "static", "cuda_graphs", "compiled"]
_ENGINES = ("eager", "static", "cuda_graphs", "compiled")
_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _torch_dtype(dtype: str) -> torch.dtype:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    return _DTYPES[dtype]


def _left_pad(
    rows: list[list[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, W] token ids (left-padded with ``pad``) and the [B, W] mask of real tokens."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long, device=device)
        mask[i, width - len(row) :] = 1
    return ids, mask


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


class HFTokenSession:
    """The decoding state of one batch of prompts: KV cache, mask, positions, last logits.

    Built by :meth:`HFTokenModel.prefill` (engine ``"eager"``: a ``DynamicCache``
    that grows by one slot per step). The next-token logits stay on the model's
    device: :meth:`greedy` copies B token ids to the host, ``logprobs`` the [B, V]
    log-probabilities (each computed once per step, when read); :meth:`step`
    appends one token to every row.

    >>> s = model.prefill(["a", "longer prompt"])  # doctest: +SKIP
    >>> s.step(int(s.greedy()[0])); s.logprobs.shape  # doctest: +SKIP
    (2, 313)
    """

    def __init__(self, owner: HFTokenModel, rows: list[list[int]]) -> None:
        self._owner = owner
        self._device = owner.device
        self._batch_size = len(rows)
        ids, mask = _left_pad(rows, owner.pad_token_id, self._device)
        self._logits = self._prefill(ids, mask)
        self._greedy: npt.NDArray[np.intp] | None = None
        self._logprobs: npt.NDArray[np.float32] | None = None

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        self._mask = mask
        self._next_position = positions[:, -1:] + 1
        self._cache = DynamicCache(config=self._owner.model.config)
        return self._owner._forward(ids, mask, positions, self._cache)

    def _advance(self, ids: torch.Tensor) -> torch.Tensor:
        ones = torch.ones((self.batch_size, 1), dtype=self._mask.dtype, device=self._device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        positions = self._next_position
        self._next_position = positions + 1
        return self._owner._forward(ids, self._mask, positions, self._cache)

    @property
    def batch_size(self) -> int:
        """Number of rows B."""
        return self._batch_size

    def greedy_on_device(self) -> torch.Tensor:
        """Each row's greedy next token as a [B] tensor on the model's device (ties: lower id)."""
        with torch.inference_mode():
            return self._logits.argmax(dim=-1)

    def greedy(self) -> npt.NDArray[np.intp]:
        """Each row's greedy next token, shape [B] (argmax on the device; B ids copied)."""
        if self._greedy is None:
            self._greedy = self.greedy_on_device().cpu().numpy().astype(np.intp)
        return self._greedy

    @property
    def logprobs(self) -> npt.NDArray[np.float32]:
        """Next-token log-probabilities of every row, shape [B, V], float32 (copied when read)."""
        if self._logprobs is None:
            with torch.inference_mode():
                out = torch.log_softmax(self._logits.float(), dim=-1)
            self._logprobs = np.ascontiguousarray(out.cpu().numpy(), dtype=np.float32)
        return self._logprobs

    def step(self, token: int) -> None:
        """Append ``token`` to every row (one batched [B, 1] forward)."""
        tok = int(token)
        if not 0 <= tok < self._owner.vocab_size:
            raise ValueError(f"token must be in [0, {self._owner.vocab_size}), got {token!r}")
        self.step_rows(torch.full((self.batch_size, 1), tok, dtype=torch.long, device=self._device))

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` to every row: one [B, w] forward (w = len(tokens)).

        The logits, greedy tokens and cache are those of w :meth:`step` calls up to
        float rounding (one w-token forward instead of w one-token ones).
        """
        ids = check_token_ids(tokens, self._owner.vocab_size)
        if len(ids) == 1:
            self.step(ids[0])
            return
        width = len(ids)
        row = torch.tensor(ids, dtype=torch.long, device=self._device)
        ones = torch.ones((self.batch_size, width), dtype=self._mask.dtype, device=self._device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        positions = self._next_position + torch.arange(width, device=self._device)
        self._next_position = positions[:, -1:] + 1
        self._logits = self._owner._forward(
            row.expand(self.batch_size, width), self._mask, positions, self._cache
        )
        self._greedy = None
        self._logprobs = None

    def step_rows(self, ids: torch.Tensor) -> None:
        """Append one (possibly different) token per row: ``ids`` of shape [B, 1] on the device."""
        self._logits = self._advance(ids)
        self._greedy = None
        self._logprobs = None

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        """Each row's own greedy continuation of up to ``n`` tokens, [B, j]; state kept.

        See :class:`~dprag_core.models.base.LookaheadSession`: j - 1 forwards of
        [B, 1] (each row fed its own last token), then the cache, mask, positions
        and logits go back to where they were, so the session is exactly as
        before: ``greedy()``, ``logprobs`` and every later step equal those of a
        session that never looked ahead, bit for bit (the eager cache is cut back
        to its length; the static engines rewind their slot counters, close the
        lookahead's slots in the mask and restore positions, without copying the
        cache). One exception: a static batch with fewer than n - 1 free slots
        grows before the lookahead (decided by n alone, not by where the rows
        stop), and attention over more (closed) slots rounds differently in the
        last bits (about 1e-7 in float32) until the other session grows too, as
        between any two cache lengths. Each row's tokens are those of greedy
        decoding of that row alone. Its time grows with j, which depends on every
        row: like the prefill's time (the documents' lengths), timing is outside
        the threat model (the adversary sees answers, DESIGN §1).

        >>> s = model.prefill(["Question: who treats headache?\\nAnswer:"])  # doctest: +SKIP
        >>> s.lookahead(3).shape, s.greedy()  # doctest: +SKIP
        ((1, 3), array([64]))
        """
        limit = positive_int("n", n)
        self._reserve(limit - 1)
        saved = self._save()
        greedy, logprobs = self._greedy, self._logprobs
        columns = [self.greedy()]
        try:
            while len(columns) < limit and not (stop and stop(np.stack(columns, axis=1))):
                last = torch.as_tensor(columns[-1], dtype=torch.long, device=self._device)
                self.step_rows(last.view(-1, 1))
                columns.append(self.greedy())
        finally:
            self._restore(saved)
            self._greedy, self._logprobs = greedy, logprobs
        return np.stack(columns, axis=1)

    def _reserve(self, steps: int) -> None:
        """Make room for ``steps`` decode steps before a lookahead (the eager cache needs none)."""

    def _save(self) -> Any:
        """What :meth:`lookahead` restores: the eager cache grows by concatenation, so the
        old mask, positions and logits tensors are never written to and are kept as is."""
        check_rewindable(self._cache)
        return self._mask, self._next_position, self._logits

    def _restore(self, saved: Any) -> None:
        self._mask, self._next_position, self._logits = saved
        length = int(self._mask.shape[1])
        for layer in self._cache.layers:
            assert isinstance(layer, DynamicLayer)  # checked by _save
            keys, values = layer.keys, layer.values
            assert keys is not None and values is not None
            layer.keys, layer.values = keys[..., :length, :], values[..., :length, :]


class HFStaticSession(HFTokenSession):
    """A session on a pooled static cache (engines ``"static"`` and ``"cuda_graphs"``).

    Same interface and same tokens as :class:`HFTokenSession`; each decode step
    runs on fixed buffers (see :mod:`dprag_core.models.hf_static`), replayed as a
    CUDA graph with ``"cuda_graphs"``. The batch goes back to the model's pool
    when the session is garbage-collected. With ``"cuda_graphs"`` the logits are
    the graph's output buffer: read them (``greedy``, ``logprobs``) before the
    next step, as every mechanism does (:meth:`lookahead` keeps a copy).
    """

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pool = self._owner._pool
        assert pool is not None
        width = int(ids.shape[1])
        self._batch = pool.acquire(self.batch_size, cache_length(width))
        self._release = weakref.finalize(self, pool.release, self._batch)
        self._free_slots = self._batch.length - width  # counted here: no host sync per step
        vocab = self._owner.vocab_size
        return self._batch.prefill(ids, mask)[:, :vocab]

    def _advance(self, ids: torch.Tensor) -> torch.Tensor:
        if self._free_slots == 0:
            self._grow()
        self._free_slots -= 1
        return self._batch.decode(ids)[:, : self._owner.vocab_size]

    def _save(self) -> Any:
        """What :meth:`lookahead` restores, without copying the cache.

        The filled count is known on the host (``length - _free_slots``: no
        sync); the positions are copied ([B, 1]), and the logits too when they
        are a CUDA graph's output buffer (the lookahead's steps overwrite it).
        """
        batch = self._batch
        with torch.inference_mode():
            positions = batch.positions.clone()
            logits = self._logits if batch.graph is None else self._logits.clone()
        return batch.length - self._free_slots, positions, logits

    def _restore(self, saved: Any) -> None:
        """Put the saved state back on the current batch (the lookahead may have grown it)."""
        filled, positions, logits = saved
        self._batch.rewind(filled, positions)
        self._free_slots = self._batch.length - filled
        self._logits = logits

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` to every row: one decode step each (the step a
        CUDA graph replays is one token wide)."""
        for token in check_token_ids(tokens, self._owner.vocab_size):
            self.step(token)

    def _reserve(self, steps: int) -> None:
        """Grow before a lookahead that could, so that whether the batch grows depends on
        the public ``n`` only, never on where the rows' words end (which depends on every
        row's documents): a grown batch rounds differently in the last bits."""
        if self._free_slots >= steps:
            return
        if self._batch.graph is not None:  # its output buffer goes back to the pool with it
            with torch.inference_mode():
                self._logits = self._logits.clone()
        while self._free_slots < steps:
            self._grow()

    def _grow(self) -> None:
        pool = self._owner._pool
        assert pool is not None
        old = self._batch
        new = pool.acquire(old.rows, cache_length(old.length))
        old.copy_into(new)
        self._release.detach()
        pool.release(old)
        self._batch = new
        self._release = weakref.finalize(self, pool.release, new)
        self._free_slots += new.length - old.length


class HFTokenModel(TokenizerCodec):
    """A transformers causal LM as a :class:`~dprag_core.models.base.LogprobModel`.

    Build it from a name or local path (:meth:`from_pretrained`) or from an
    already-loaded model and tokenizer. Prompts are user messages: wrapped with
    the tokenizer's chat template (``add_generation_prompt=True``) when it has one,
    used verbatim (with the tokenizer's usual special tokens) otherwise. The
    vocabulary, end ids and padding are resolved once
    (:func:`~dprag_core.models.codec.special_tokens`, shared with the server
    client); ``eos_token_ids`` replaces the end set.

    >>> tm = HFTokenModel(model, tokenizer)  # doctest: +SKIP
    >>> tm.decode(tm.encode("aspirin"))  # doctest: +SKIP
    'aspirin'
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        engine: Engine = "eager",
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        if not callable(model) or not hasattr(model, "config"):
            raise TypeError("model must be a transformers causal LM (PreTrainedModel)")
        if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
            raise TypeError("tokenizer must be a transformers tokenizer")
        super().__init__(tokenizer)  # encode, decode, prompt_ids, prompt_rows
        self.model = model.eval()
        out = model.get_output_embeddings()
        logit_rows = int(out.weight.shape[0] if out is not None else model.config.vocab_size)
        configs = (model.config, getattr(model, "generation_config", None))
        self.special = special_tokens(  # padded logit rows are not tokens
            tokenizer, configs=configs, logit_rows=logit_rows, eos_token_ids=eos_token_ids
        )
        self._vocab, self._eos = self.special.vocab_size, self.special.eos_token_ids
        self.pad_token_id = self.special.pad_token_id
        params = inspect.signature(model.forward).parameters
        self._keep_kwarg = "logits_to_keep" in params
        self._cache_kwarg = cache_argument(model)
        if engine not in _ENGINES:
            raise ValueError(f"engine must be one of {_ENGINES}, got {engine!r}")
        self.engine = engine
        self._pool: StaticPool | None = None
        if engine != "eager":
            check_static_model(model, engine)
            if engine == "compiled":
                compile_regions(model)
            self._pool = StaticPool(model, graphs=engine != "static")

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: DType = "float32",
        device: str = "cpu",
        engine: Engine = "eager",
    ) -> HFTokenModel:
        """Load a model and its tokenizer with transformers (``dtype``, ``device``, ``engine``).

        >>> HFTokenModel.from_pretrained("./reader-lm", dtype="bfloat16")  # doctest: +SKIP
        >>> HFTokenModel.from_pretrained(  # doctest: +SKIP
        ...     "./reader-lm", dtype="bfloat16", device="cuda", engine="cuda_graphs")
        """
        tdtype = _torch_dtype(dtype)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model: Any = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=tdtype, attn_implementation="sdpa"
        )
        return cls(model.to(device), tokenizer, engine=engine)

    def check_lookahead(self) -> None:
        """Refuse, before any query, a model whose sessions cannot look ahead exactly.

        :meth:`HFTokenSession.lookahead` rewinds full-attention caches only; the
        static engines accept nothing else, the eager one is checked here
        (sliding-window or recurrent layers would fail at the first word).
        """
        if self.engine != "eager":
            return  # check_static_model refused every other kind when the model was built
        check_rewindable(DynamicCache(config=self.model.config))

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return torch.device(next(self.model.parameters()).device)

    @property
    def vocab_size(self) -> int:
        """Number V of real tokens (padded logit rows excluded): ids 0..V-1, rows of width V."""
        return self._vocab

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The end ids of :func:`~dprag_core.models.codec.special_tokens` (tokenizer, model
        config, generation config, chat template's end of turn; or ``eos_token_ids``)."""
        return self._eos

    def prefill(self, prompts: Sequence[str]) -> HFTokenSession:
        """Encode B prompts and run one batched, left-padded forward that fills the cache."""
        rows = self.prompt_rows(prompts)
        if self._pool is not None:
            return HFStaticSession(self, rows)
        return HFTokenSession(self, rows)

    def prefill_logprobs(self, prompts: Sequence[str]) -> HFTokenSession:
        """:meth:`prefill`; the session's ``logprobs`` are computed when read."""
        return self.prefill(prompts)

    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache,
    ) -> torch.Tensor:
        """The last position's logits over the real tokens, [B, V], on the model's device."""
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            self._cache_kwarg: cache,
            "use_cache": True,
        }
        if self._keep_kwarg:
            kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            logits: torch.Tensor = self.model(**kwargs).logits[:, -1, : self._vocab]
        return logits


class HFTextModel:
    """Batched greedy text generation (a :class:`~dprag_core.models.base.TextModel`).

    Runs the same cached engine as :class:`HFTokenModel`, each row taking its own
    argmax token, until every row has emitted EOS or ``max_new_tokens`` is reached.
    Greedy, no sampling warpers; returns only the new text of each prompt.

    >>> HFTextModel(model, tokenizer).generate(["Question: hi\\nAnswer:"])  # doctest: +SKIP
    ['...']
    """

    def __init__(self, model: Any, tokenizer: Any, *, engine: Engine = "eager") -> None:
        self.token_model = HFTokenModel(model, tokenizer, engine=engine)

    @classmethod
    def on(cls, token_model: HFTokenModel) -> HFTextModel:
        """A text model on ``token_model``: its engine and its pooled caches, not new ones.

        >>> HFTextModel.on(HFTokenModel(model, tokenizer)).generate(["hi"])  # doctest: +SKIP
        ['...']
        """
        if not isinstance(token_model, HFTokenModel):
            raise TypeError(
                f"token_model must be an HFTokenModel, got {type(token_model).__name__}"
            )
        text_model = cls.__new__(cls)
        text_model.token_model = token_model
        return text_model

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: DType = "float32",
        device: str = "cpu",
        engine: Engine = "eager",
    ) -> HFTextModel:
        """Load a model and its tokenizer (see :meth:`HFTokenModel.from_pretrained`)."""
        return cls.on(
            HFTokenModel.from_pretrained(name_or_path, dtype=dtype, device=device, engine=engine)
        )

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One greedy completion per prompt, in order (new text only).

        The loop stays on the device: each step's argmax feeds the next step
        (finished rows are fed the pad token), and one boolean ("all rows done?")
        crosses to the host per step; the [B, T] tokens are copied once at the end.
        """
        limit = positive_int("max_new_tokens", max_new_tokens)
        tm = self.token_model
        session = tm.prefill(prompts)
        device = tm.device
        eos = torch.tensor(sorted(tm.eos_token_ids), dtype=torch.long, device=device)
        done = torch.zeros(session.batch_size, dtype=torch.bool, device=device)
        picked: list[torch.Tensor] = []
        with torch.inference_mode():
            for t in range(limit):
                tokens = session.greedy_on_device()
                picked.append(tokens)
                done |= torch.isin(tokens, eos)
                if t == limit - 1 or bool(done.all()):
                    break
                fed = torch.where(done, tm.pad_token_id, tokens)
                session.step_rows(fed.unsqueeze(1))
            table = torch.stack(picked, dim=1).cpu().tolist()
        eos_ids = tm.eos_token_ids
        outputs = []
        for row in table:
            cut = next((i for i, tok in enumerate(row) if tok in eos_ids), len(row))
            outputs.append(tm.decode_answer(row[:cut]))
        return outputs
