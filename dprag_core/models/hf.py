"""The transformers backend: a KV-cached batched token engine and greedy text generation.

:class:`HFTokenModel` is the hot path of the token-level DP mechanisms (docs/design.md §6):
one prefill of B prompts into a left-padded cache (attention mask, position ids
from the cumulative mask, a persistent ``DynamicCache``), then one ``[B, 1]`` forward per
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

Engines (``engine=``) come from one table, :data:`ENGINES`: each
:class:`EngineSpec` names the cache backend of its sessions
(:mod:`~dprag_core.models.hf_cache`) and what the model needs (static caches,
CUDA graphs, compiled blocks). Every engine gives the same tokens; they differ
in speed only.

**Batch invariance.** The voting mechanisms' privacy argument needs each
row's next token to depend on that row's prompt only ("one unit moves one
vote"). Rows share one batch, and floating-point results depend on the shapes
of the kernels that compute them: with the batch padded to its longest row, a
voter's logits moved (by ~1e-5 on the reader, fp32, CPU) when *another*
voter's documents changed length, so at a near-tie one voter's vote could
depend on another's documents. Every session is therefore laid out in a
*public* shape: B rows (m voters + the public row) left-padded to the model's
``prompt_width``, a public parameter
(:data:`~dprag_core.models.envelope.DEFAULT_PROMPT_WIDTH` tokens, or half the
model's positions if fewer, unless set), whatever the documents.
With every shape public, and every forward on the masked attention kernel
(the eager layout keeps one slot closed for every row,
:func:`~dprag_core.models.hf_cache.with_closed_slot`: transformers would drop an
all-ones mask, and the unmasked kernel rounds differently), each output row is
the same deterministic function of its own row's inputs (matrix products reduce
within a row; attention is per row and head; padded positions are masked), so a
row's logits are bit-identical whatever the other rows hold
(``tests/models/test_batch_invariance.py`` perturbs them on every engine that
runs on CPU, also with AVX2 kernels forced: ``tests/models/test_cpu_kernels.py``).
A prompt is cut to its last ``prompt_bytes(prompt_width)`` UTF-8 bytes before
it is tokenized, and a longer prompt keeps its last ``prompt_width`` tokens
(the question and the answer cue end every prompt; the one rule of every
engine, :mod:`~dprag_core.models.envelope`): a function of the row's own prompt,
so the argument holds, and the tokenizer's work is bounded by the public width. Set ``prompt_width``
to the longest prompt you expect: a session's cost grows with it (each decode
step attends over ``prompt_width`` slots per row; the prefill computes B x
``prompt_width`` positions on every engine, device and thread count, so its
work does not follow the rows' token counts). The eager engine's opt-in
``prefill="rows"`` prefills each row alone, its own tokens only, and lays the
rows out in the public shape (the tokens a row shares with the public
``shared_prefix``, the chat template's head and the text every prompt starts
with, computed once per model: :class:`~dprag_core.models.hf_cache.SharedPrefix`):
less work on one CPU thread, and a query's time then follows the retrieved
rows' token counts, up to the public width.

torch and transformers are imported only here; ``import dprag_core.models`` stays
light.

>>> model = HFTokenModel.from_pretrained("path/to/model")  # doctest: +SKIP
>>> session = model.prefill(["Question: who treats headache?\\nAnswer:"])  # doctest: +SKIP
>>> token = int(session.greedy()[0])  # doctest: +SKIP
>>> session.step(token)  # doctest: +SKIP
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("dprag_core.models.hf", missing, extra="hf") from missing

from dprag_core.models.base import StopRule
from dprag_core.models.codec import TokenizerCodec, check_token_ids, special_tokens
from dprag_core.models.cut import marked
from dprag_core.models.envelope import (
    check_answer_room,
    keep_last,
    public_width,
)
from dprag_core.models.hf_cache import (
    CacheBackend,
    DynamicBackend,
    ModelCall,
    SharedPrefix,
    check_rewindable,
)
from dprag_core.models.hf_static import (
    StaticBackend,
    StaticBatch,
    StaticPool,
    check_static_model,
    compile_regions,
)
from dprag_core.validation import positive_int

__all__ = [
    "ENGINES",
    "PREFILLS",
    "Engine",
    "EngineSpec",
    "HFStaticSession",
    "HFTextModel",
    "HFTokenModel",
    "HFTokenSession",
    "Prefill",
    "check_rewindable",
    "cpu_has_native_bf16",
    "load_dtype",
]

DType = Literal["float32", "bfloat16"]
Prefill = Literal["padded", "rows"]
"""The eager engine's prefill (``prefill=`` of :class:`HFTokenModel`)."""
PREFILLS: tuple[Prefill, ...] = ("padded", "rows")
Engine = str
"""An engine's name: a key of :data:`ENGINES` (the one place engines are listed)."""
_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _torch_dtype(dtype: str) -> torch.dtype:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    return _DTYPES[dtype]


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix instructions (x86: AVX512_BF16 or AMX, as torch
    reads them; another architecture: a ``bf16`` flag in ``/proc/cpuinfo``, e.g. Arm v8.6).

    Without them torch emulates bf16 matrix products through float32 conversions:
    on a 2-core AMD EPYC with AVX2 only, one 64x576x1536 product took ~50x the
    float32 one's CPU time (``benchmarks/cpu_answer.py`` prints the factor).

    >>> isinstance(cpu_has_native_bf16(), bool)
    True
    """
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    if platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}:
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace").split()
    except OSError:
        return False
    return "bf16" in flags


def load_dtype(dtype: str, device: str) -> torch.dtype:
    """The torch dtype :meth:`HFTokenModel.from_pretrained` loads for ``dtype`` on ``device``.

    ``"bfloat16"`` on a CPU without native bf16 (:func:`cpu_has_native_bf16`)
    loads float32 instead, with one ``UserWarning`` per load saying so: there bf16
    is many times slower than float32, never faster. The choice reads the CPU
    only (public), nothing of a query or a corpus.

    >>> load_dtype("float32", "cpu")
    torch.float32
    >>> load_dtype("bfloat16", "cuda")
    torch.bfloat16
    """
    tdtype = _torch_dtype(dtype)
    on_cpu = torch.device(device).type == "cpu"
    if tdtype is torch.bfloat16 and on_cpu and not cpu_has_native_bf16():
        warnings.warn(
            "dtype='bfloat16' on a CPU without bfloat16 matrix instructions (AVX512_BF16, "
            "AMX or Arm bf16): loading float32 instead, which runs many times faster "
            "there (about 50x per matrix product on an AVX2-only CPU)",
            UserWarning,
            stacklevel=3,
        )
        return torch.float32
    return tdtype


def _left_pad(
    rows: list[list[int]], pad: int, device: torch.device, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, width] token ids (left-padded with ``pad``) and the [B, width] mask of real tokens.

    ``width`` is public (the model's ``prompt_width``), never the longest row: a
    longer row keeps its last ``width`` tokens (module docstring, *batch invariance*).
    """
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, kept in enumerate(keep_last(rows, width)):
        ids[i, width - len(kept) :] = torch.tensor(kept, dtype=torch.long, device=device)
        mask[i, width - len(kept) :] = 1
    return ids, mask


class HFTokenSession:
    """The decoding state of one batch of prompts: a cache backend and the last logits.

    Built by :meth:`HFTokenModel.prefill` over the engine's cache backend
    (:mod:`~dprag_core.models.hf_cache`: a ``DynamicCache`` for ``"eager"``, a
    pooled static batch for the others). The next-token logits stay on the
    model's device, cut to the real vocabulary here (the one place):
    :meth:`greedy` copies B token ids to the host, ``logprobs`` the [B, V]
    log-probabilities (each computed once per step, when read); :meth:`step`
    appends one token to every row. On the graph engines the logits are the
    graph's output buffer: read them (``greedy``, ``logprobs``) before the next
    step, as every mechanism does (:meth:`lookahead` keeps a copy).

    >>> s = model.prefill(["a", "longer prompt"])  # doctest: +SKIP
    >>> s.step(int(s.greedy()[0])); s.logprobs.shape  # doctest: +SKIP
    (2, 313)
    """

    def __init__(self, owner: HFTokenModel, rows: list[list[int]]) -> None:
        self._owner = owner
        self._device = owner.device
        self._batch_size = len(rows)
        ids, mask = _left_pad(rows, owner.pad_token_id, self._device, owner.prompt_width)
        self._backend: CacheBackend = owner._spec.backend(owner)
        self._set_logits(self._backend.prefill(ids, mask))
        self._first: _FirstStep | None = None
        self._appended = 0  # tokens step/extend appended to every row (public: the release)

    def _make_room(self, tokens: int) -> None:
        """Count ``tokens`` more positions per row, refused (ValueError) past the model's
        answer room: decided by public numbers (the width, the tokens appended), never by
        a row's own length, so a long prompt cannot make one query fail and not another."""
        room = self._owner.answer_room
        if room is not None and self._appended + tokens > room:
            raise ValueError(
                f"an answer may hold at most {room} tokens on this model (its context, "
                f"{self._owner.context_length} positions, minus prompt_width "
                f"{self._owner.prompt_width}): lower max_new_tokens or prompt_width"
            )

    def _set_logits(self, logits: torch.Tensor) -> None:
        """The new next-token logits, cut to the real tokens (padded logit rows excluded)."""
        self._logits = logits[:, : self._owner.vocab_size]
        self._greedy: npt.NDArray[np.intp] | None = None
        self._logprobs: npt.NDArray[np.float32] | None = None

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
        self._make_room(1)
        self.step_rows(torch.full((self.batch_size, 1), tok, dtype=torch.long, device=self._device))
        self._appended += 1

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` to every row: one [B, w] forward (w = len(tokens)).

        The logits, greedy tokens and cache are those of w :meth:`step` calls up to
        float rounding (one w-token forward instead of w one-token ones), on every
        engine (the static ones write the w slots in one step,
        :meth:`~dprag_core.models.hf_static.StaticBatch.write`). A one-token word
        that every row's last :meth:`lookahead` began with is not recomputed: that
        lookahead's first step fed every row this very token, so its cache slot and
        logits are kept, bit for bit what the [B, 1] forward would give.
        """
        ids = check_token_ids(tokens, self._owner.vocab_size)
        self._make_room(len(ids))
        self._appended += len(ids)
        first, self._first = self._first, None
        if len(ids) == 1 and first is not None and bool((first.tokens == ids[0]).all()):
            self._backend.restore(first.saved)
            self._logits, self._greedy, self._logprobs = first.logits, None, None
            return
        row = torch.tensor(ids, dtype=torch.long, device=self._device)
        self.step_rows(row.expand(self.batch_size, len(ids)))

    def step_rows(self, ids: torch.Tensor) -> None:
        """Append (possibly different) tokens per row: ``ids`` of shape [B, w] on the device."""
        self._first = None
        self._set_logits(self._backend.append(ids))

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        """Each row's own greedy continuation of up to ``n`` tokens, [B, j]; state kept.

        See :class:`~dprag_core.models.base.LookaheadSession`: j - 1 forwards of
        [B, 1] (each row fed its own last token), then the backend goes back to
        where it was (the eager cache is cut back to its length; the static
        engines rewind their slot counters, close the lookahead's slots in the
        mask and restore positions, without copying the cache), so the session is
        exactly as before: ``greedy()``, ``logprobs`` and every later step equal
        those of a session that never looked ahead, bit for bit. One exception: a
        static batch with fewer than n - 1 free slots grows before the lookahead
        (decided by n alone, not by where the rows stop), and attention over more
        (closed) slots rounds differently in the last bits (about 1e-7 in
        float32) than a session that did not look ahead, as between any two cache
        lengths; the keys and values written until that session grows too carry
        the difference on (AVX2 kernels: 20 of 960 log-probabilities off by up to
        4.8e-7 after both had grown; AVX-512 kernels happened to agree again).
        Whether a batch grows is a function of public numbers (n, the tokens
        appended), so two sessions over neighbouring corpora grow at the same
        steps and each row stays bit-identical whatever the other rows hold.
        Each row's tokens are those of greedy decoding of that row alone.
        Its time grows with j, which depends on every row: like the prefill's time
        (the documents' lengths), timing is outside the threat model (the
        adversary sees answers, docs/design.md §1).

        >>> s = model.prefill(["Question: who treats headache?\\nAnswer:"])  # doctest: +SKIP
        >>> s.lookahead(3).shape, s.greedy()  # doctest: +SKIP
        ((1, 3), array([64]))
        """
        limit = positive_int("n", n)
        self._make_room(limit - 1)  # the n - 1 steps it may take, however many it takes
        backend = self._backend
        self._logits = backend.reserve(limit - 1, self._logits)
        saved = backend.save()
        kept = (backend.persistent(self._logits), self._greedy, self._logprobs)
        columns = [self.greedy()]
        first = None
        try:
            while len(columns) < limit and not (stop and stop(np.stack(columns, axis=1))):
                last = torch.as_tensor(columns[-1], dtype=torch.long, device=self._device)
                self.step_rows(last.view(-1, 1))
                if first is None:  # every row fed its own first token: kept for extend
                    after = backend.save()
                    first = _FirstStep(after, columns[0], backend.persistent(self._logits))
                columns.append(self.greedy())
        finally:
            backend.restore(saved)
            self._logits, self._greedy, self._logprobs = kept
        self._first = first
        return np.stack(columns, axis=1)


@dataclass(frozen=True)
class _FirstStep:
    """A lookahead's first step: the state after it, each row's token, the logits after."""

    saved: Any
    tokens: npt.NDArray[np.intp]
    logits: torch.Tensor


class HFStaticSession(HFTokenSession):
    """A session of the static engines (those of :data:`ENGINES` with ``static``).

    The same session over a :class:`~dprag_core.models.hf_static.StaticBackend`;
    it adds only read access to the backend's batch (for tests and diagnostics).
    """

    _backend: StaticBackend

    @property
    def _batch(self) -> StaticBatch:
        """The static batch the session holds now (it changes when the batch grows)."""
        return self._backend.batch

    @property
    def _free_slots(self) -> int:
        """Slots left before the batch must grow (counted on the host)."""
        return self._backend.free_slots


@dataclass(frozen=True)
class EngineSpec:
    """One engine of :class:`HFTokenModel`: its cache backend and what it needs.

    ``static``: pooled static caches (:mod:`~dprag_core.models.hf_static`);
    ``graphs``: each decode step replayed as a CUDA graph (CUDA only);
    ``compiled``: the model's norm and MLP blocks compiled in place
    (:func:`~dprag_core.models.hf_static.compile_regions`).

    >>> ENGINES["static"].static, ENGINES["static"].graphs
    (True, False)
    """

    name: str
    static: bool
    graphs: bool
    compiled: bool
    session: type[HFTokenSession]
    backend: Callable[[HFTokenModel], CacheBackend]
    summary: str


def _dynamic(owner: HFTokenModel) -> CacheBackend:
    rows = owner.prefill_kind == "rows"
    return DynamicBackend(owner._call, owner.device, rows=rows, prefix=owner._prefix)


def _static(owner: HFTokenModel) -> CacheBackend:
    assert owner._pool is not None  # built with the model for every static engine
    return StaticBackend(owner._pool)


#: The engines of :class:`HFTokenModel`, by name (the ``engine=`` argument).
ENGINES: Mapping[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        EngineSpec(
            name="eager",
            static=False,
            graphs=False,
            compiled=False,
            session=HFTokenSession,
            backend=_dynamic,
            summary="DynamicCache, HF eager per step (the default)",
        ),
        EngineSpec(
            name="static",
            static=True,
            graphs=False,
            compiled=False,
            session=HFStaticSession,
            backend=_static,
            summary="pooled static KV caches, eager steps",
        ),
        EngineSpec(
            name="cuda_graphs",
            static=True,
            graphs=True,
            compiled=False,
            session=HFStaticSession,
            backend=_static,
            summary="static caches, each decode step replayed as a CUDA graph (GPU only)",
        ),
        EngineSpec(
            name="compiled",
            static=True,
            graphs=True,
            compiled=True,
            session=HFStaticSession,
            backend=_static,
            summary="cuda_graphs with the norm and MLP blocks compiled in place (GPU only)",
        ),
    )
}


def _checked_prefill(prefill: object, engine: str) -> Prefill:
    """``prefill`` if it is one of :data:`PREFILLS` and ``engine`` runs it (``"rows"``:
    the eager engine only); ``ValueError`` naming the parameter otherwise.

    >>> _checked_prefill("rows", "eager")
    'rows'
    """
    if not isinstance(prefill, str) or prefill not in PREFILLS:
        raise ValueError(f"prefill must be one of {PREFILLS}, got {prefill!r}")
    if prefill == "rows" and engine != "eager":
        raise ValueError(
            f"prefill='rows' runs on engine='eager' only, got engine={engine!r}: "
            "leave prefill='padded' (the static engines prefill every row at the public width)"
        )
    return "rows" if prefill == "rows" else "padded"


def _positions(config: Any) -> int | None:
    """The model's ``max_position_embeddings`` (None when it states none)."""
    limit = getattr(config, "max_position_embeddings", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


class HFTokenModel(TokenizerCodec):
    """A transformers causal LM as a :class:`~dprag_core.models.base.LogprobModel`.

    Build it from a name or local path (:meth:`from_pretrained`) or from an
    already-loaded model and tokenizer. Prompts are user messages: wrapped with
    the tokenizer's chat template (``add_generation_prompt=True``) when it has one,
    used verbatim (with the tokenizer's usual special tokens) otherwise. The
    vocabulary, end ids and padding are resolved once
    (:func:`~dprag_core.models.codec.special_tokens`, shared with the server
    client); ``eos_token_ids`` replaces the end set. ``prompt_width`` is the
    public width every session's rows are padded to (the module docstring's
    *batch invariance*; longer prompts keep their last ``prompt_width`` tokens).
    ``prefill`` is the eager engine's prefill: ``"padded"`` (the default, every
    engine's) is one batched forward over the public B x ``prompt_width`` layout,
    the same work whatever the prompts hold; ``"rows"`` (``engine="eager"`` only)
    prefills each row alone, its own tokens only, and lays the rows out in the
    same public shape (the same logits within float rounding, each row still a
    function of its own prompt): less work on a CPU with one torch thread, but **the query's time
    then follows the retrieved rows' token counts** (up to ``prompt_width``), so a
    caller with a stopwatch learns about the documents (docs/architecture.md,
    "What time reveals"). A model whose cache holds a recurrent state keeps the
    padded prefill. ``shared_prefix`` is public text the prompts start with (a
    template's head, before its ``{context}``): ``prefill="rows"`` computes the
    keys and values of the chat template's head and that text once and reuses
    them for every row that starts with their tokens
    (:class:`~dprag_core.models.hf_cache.SharedPrefix`).

    >>> tm = HFTokenModel(model, tokenizer)  # doctest: +SKIP
    >>> tm.decode(tm.encode("aspirin"))  # doctest: +SKIP
    'aspirin'
    >>> HFTokenModel(model, tokenizer, prefill="rows")  # doctest: +SKIP
    """

    prompt_width: int
    prefill_kind: Prefill

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        engine: Engine = "eager",
        eos_token_ids: Sequence[int] | None = None,
        prompt_width: int | None = None,
        shared_prefix: str = "",
        prefill: Prefill = "padded",
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
        self.context_length = _positions(model.config)
        self.prompt_width = public_width(
            prompt_width, context=self.context_length, source="model's max_position_embeddings"
        )
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {tuple(ENGINES)}, got {engine!r}")
        self._spec = ENGINES[engine]
        self.engine = engine
        self.prefill_kind = _checked_prefill(prefill, engine)
        self._call = ModelCall(model)
        if not isinstance(shared_prefix, str):
            raise TypeError(f"shared_prefix must be a str, got {type(shared_prefix).__name__}")
        self._prefix = SharedPrefix(self._call, self.prompt_ids(shared_prefix))
        self._pool: StaticPool | None = None
        if self._spec.static:
            check_static_model(model, engine, cuda=self._spec.graphs)
            if self._spec.compiled:
                compile_regions(model)
            self._pool = StaticPool(model, graphs=self._spec.graphs)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: DType = "float32",
        device: str = "cpu",
        engine: Engine = "eager",
        prompt_width: int | None = None,
        shared_prefix: str = "",
        prefill: Prefill = "padded",
    ) -> HFTokenModel:
        """Load a model and its tokenizer with transformers (``dtype``, ``device``, ``engine``;
        ``prompt_width``, ``shared_prefix`` and ``prefill`` as in the class docstring).

        ``dtype="bfloat16"`` on a CPU without bf16 matrix instructions loads float32
        (one ``UserWarning`` at load, :func:`load_dtype`): there it is the fast one.

        >>> HFTokenModel.from_pretrained("./reader-lm", dtype="bfloat16")  # doctest: +SKIP
        >>> HFTokenModel.from_pretrained(  # doctest: +SKIP
        ...     "./reader-lm", dtype="bfloat16", device="cuda", engine="cuda_graphs")
        """
        _checked_prefill(prefill, engine)  # before the weights load
        tdtype = load_dtype(dtype, device)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model: Any = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=tdtype, attn_implementation="sdpa"
        )
        return cls(
            model.to(device),
            tokenizer,
            engine=engine,
            prompt_width=prompt_width,
            shared_prefix=shared_prefix,
            prefill=prefill,
        )

    @property
    def answer_room(self) -> int | None:
        """New tokens a row may take after a full-width prompt: ``context_length -
        prompt_width`` (None when the model states no ``max_position_embeddings``)."""
        return None if self.context_length is None else self.context_length - self.prompt_width

    def check_lookahead(self) -> None:
        """Refuse, before any query, a model whose sessions cannot look ahead exactly.

        :meth:`HFTokenSession.lookahead` rewinds full-attention caches only; the
        static engines accept nothing else, the eager one is checked here
        (sliding-window or recurrent layers would fail at the first word).
        """
        if self._spec.static:
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
        """Encode B prompts and fill the session's left-padded cache (the engine's backend)."""
        return self._spec.session(self, self.prompt_rows(prompts))

    def prefill_logprobs(self, prompts: Sequence[str]) -> HFTokenSession:
        """:meth:`prefill`; the session's ``logprobs`` are computed when read."""
        return self.prefill(prompts)


class HFTextModel:
    """Batched greedy text generation (a :class:`~dprag_core.models.base.TextModel`).

    Runs the same cached engine as :class:`HFTokenModel`, each row taking its own
    argmax token, for exactly ``max_new_tokens`` steps: a row that emitted EOS is
    fed the pad token from there on, and the batch never stops early, so how many
    steps a call takes (and how long) does not depend on what the prompts make
    the model write (private prompts: DP-KSA's and DPAnswerVote's voters).
    Greedy, no sampling warpers; returns only the new text of each prompt. Each
    prompt keeps its last ``prompt_width`` tokens (the token model's public
    width), and ``max_new_tokens`` must fit its ``answer_room`` (``ValueError``
    otherwise, for every prompt alike). The prefill is the public-width one unless
    ``prefill="rows"`` (:class:`HFTokenModel`: the call's time then follows the
    prompts' token counts).

    >>> HFTextModel(model, tokenizer).generate(["Question: hi\\nAnswer:"])  # doctest: +SKIP
    ['...']
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        engine: Engine = "eager",
        prompt_width: int | None = None,
        shared_prefix: str = "",
        prefill: Prefill = "padded",
    ) -> None:
        self.token_model = HFTokenModel(
            model,
            tokenizer,
            engine=engine,
            prompt_width=prompt_width,
            shared_prefix=shared_prefix,
            prefill=prefill,
        )

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
        prompt_width: int | None = None,
        shared_prefix: str = "",
        prefill: Prefill = "padded",
    ) -> HFTextModel:
        """Load a model and its tokenizer (see :meth:`HFTokenModel.from_pretrained`;
        ``prefill="rows"``: the query's time follows the retrieved rows' token counts)."""
        return cls.on(
            HFTokenModel.from_pretrained(
                name_or_path,
                dtype=dtype,
                device=device,
                engine=engine,
                prompt_width=prompt_width,
                shared_prefix=shared_prefix,
                prefill=prefill,
            )
        )

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One greedy completion per prompt, in order (new text only); a completion that
        reached ``max_new_tokens`` without an end token is a
        :class:`~dprag_core.models.cut.CutText`.

        The loop stays on the device: each step's argmax feeds the next step
        (finished rows are fed the pad token), ``max_new_tokens`` steps whatever the
        rows wrote (class docstring), and nothing crosses to the host until the
        [B, T] tokens are copied once at the end.
        """
        limit = positive_int("max_new_tokens", max_new_tokens)
        tm = self.token_model
        check_answer_room(tm, limit)
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
                if t == limit - 1:  # a fixed number of steps: no early stop (class docstring)
                    break
                fed = torch.where(done, tm.pad_token_id, tokens)
                session.step_rows(fed.unsqueeze(1))
            table = torch.stack(picked, dim=1).cpu().tolist()
        eos_ids = tm.eos_token_ids
        outputs: list[str] = []
        for row in table:
            cut = next((i for i, tok in enumerate(row) if tok in eos_ids), len(row))
            # a row with no end token in its `limit` tokens stopped at the limit: CutText
            outputs.append(marked(tm.decode_answer(row[:cut]), "length" if cut == limit else None))
        return outputs

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """:meth:`generate` (a :class:`~dprag_core.models.base.PerPromptTextModel`): one
        batch, whose rows are the prompts' public-width token ids; no prompt can make it
        fail alone, so a failure is the batch's and raises."""
        return list(self.generate(prompts, max_new_tokens=max_new_tokens))
