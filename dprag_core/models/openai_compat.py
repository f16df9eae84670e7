"""An OpenAI-compatible completions server (llama.cpp, vLLM, SGLang) as a token and text model.

:class:`OpenAICompatModel` implements :class:`~dprag_core.models.base.TokenModel`
(greedy tokens: what DPVote, DPSparseVote, VoteRAG and the greedy baselines
need) and :class:`~dprag_core.models.base.TextModel` (DP-KSA's responses) over a
:class:`~dprag_core.models.endpoint.CompletionsEndpoint`:

- prompts are built and tokens decoded with the model's own tokenizer, loaded
  locally with transformers (chat template when it has one, as
  :class:`~dprag_core.models.hf.HFTokenModel` does); the server receives token
  ids only. Where the server offers a tokenizer (llama.cpp's ``/tokenize``) it
  is checked once, on a public probe text, to agree with the local one;
- each decoding step is ONE batched request of the B = m + 1 token-id prompts
  with ``max_tokens: 1, temperature: 0``; the server's prefix cache (llama.cpp's
  ``cache_prompt``, vLLM's and SGLang's automatic prefix caching) makes it
  compute only the appended token of each row (``lookahead(n)``, for
  word-level voting: one request with ``max_tokens: n``);
- it is *not* a :class:`~dprag_core.models.base.LogprobModel`: a server returns
  at most the top few log-probabilities, so mechanisms that need full
  next-token distributions (DP-ICL, kNN-Prompting keys) refuse it when built.

Trust boundary: the server sees the private prompts, like any model endpoint;
nothing else does (see :mod:`dprag_core.models.endpoint`). The voting proofs
assume each row's greedy token does not depend on which other rows share its
batch (docs/servers.md says how to configure each server for that).

Concurrency: the model is thread-safe (a session is one query's state; the
connection pool is shared), so many DP queries in flight (``ainvoke``,
``abatch``, ``aquery``: each runs in a worker thread) share the server, whose
continuous batching merges their steps. :meth:`OpenAICompatModel.agenerate` is
the async text path.

>>> model = OpenAICompatModel.from_pretrained(  # doctest: +SKIP
...     "http://127.0.0.1:8080/v1", "path/to/tokenizer", model="reader")
>>> DPSparseVote(model, epsilon=5.0, delta=1e-4, m=10, k=1)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dprag_core.models.base import StopRule, stop_width
from dprag_core.models.codec import TokenizerCodec, check_token_ids
from dprag_core.models.endpoint import Completion, CompletionsEndpoint, EndpointError, Server
from dprag_core.validation import positive_int

__all__ = ["TOKENIZER_PROBE", "OpenAICompatModel", "OpenAICompatSession"]

TOKENIZER_PROBE = "The tokenizer probe: Question? Answer: yes, it is 42."
"""Public text whose token ids the server's and the local tokenizer must agree on."""


class OpenAICompatSession:
    """One batch's decoding state: the B token-id rows sent with every step's request.

    :meth:`greedy` sends one request (``max_tokens: 1``) the first time it is
    read after a :meth:`step`; :meth:`step` appends the same token to every row
    and sends nothing.
    """

    def __init__(self, owner: OpenAICompatModel, rows: list[list[int]]) -> None:
        self._owner = owner
        self._rows = rows
        self._greedy: npt.NDArray[np.intp] | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatSession(rows={len(self._rows)})"

    @property
    def batch_size(self) -> int:
        """Number of rows B."""
        return len(self._rows)

    def greedy(self) -> npt.NDArray[np.intp]:
        """Each row's greedy next token, shape [B] (one batched request, then cached)."""
        if self._greedy is None:
            done = self._owner.endpoint.complete(self._rows, max_tokens=1)
            self._greedy = np.array(
                [self._owner.tokens(c, 1)[0] for c in done],
                dtype=np.intp,
            )
        return self._greedy

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        """Each row's greedy continuation of up to ``n`` tokens, [B, j]; the rows are kept.

        See :class:`~dprag_core.models.base.LookaheadSession`. ONE batched request
        with ``max_tokens: n``: the server decodes each row greedily from its own
        tokens. A row that ended early (EOS, or a bare stop as in :meth:`greedy`)
        reads EOS from there on. ``stop`` cannot stop the server mid-request, so it
        is only a hint here: the server always decodes up to ``n`` tokens, and
        ``stop`` is applied afterwards, to return the same j columns as a session
        that stops early. Nothing is appended: :meth:`greedy` and :meth:`step` go
        on as if this had not been called.

        >>> session.lookahead(4)  # doctest: +SKIP
        array([[ 330,  2360,    13, 151645], ...])
        """
        limit = positive_int("n", n)
        done = self._owner.endpoint.complete(self._rows, max_tokens=limit)
        table = np.array([self._owner.tokens(c, limit) for c in done], dtype=np.intp)
        return np.ascontiguousarray(table[:, : stop_width(table, stop)])

    def step(self, token: int) -> None:
        """Append ``token`` to every row (sent with the next step's request)."""
        tok = int(token)
        if not 0 <= tok < self._owner.vocab_size:
            raise ValueError(f"token must be in [0, {self._owner.vocab_size}), got {token!r}")
        self.extend([tok])

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` to every row (sent with the next request)."""
        ids = check_token_ids(tokens, self._owner.vocab_size)
        for row in self._rows:
            row.extend(ids)
        self._greedy = None


class OpenAICompatModel(TokenizerCodec):
    """A model served over OpenAI-compatible completions, with its tokenizer loaded locally.

    ``endpoint`` is the server; ``tokenizer`` the model's transformers tokenizer
    (the same checkpoint the server serves), which builds the prompts and decodes
    (:class:`~dprag_core.models.codec.TokenizerCodec`: chat template when it has
    one). ``eos_token_ids`` defaults to the tokenizer's EOS. ``check_tokenizer``
    compares the server's tokenization of :data:`TOKENIZER_PROBE` with the local
    one where the server offers it, and raises ``ValueError`` if they differ (a
    different model is being served).

    >>> OpenAICompatModel(object(), object())
    Traceback (most recent call last):
    TypeError: endpoint must be a CompletionsEndpoint, got object
    """

    def __init__(
        self,
        endpoint: CompletionsEndpoint,
        tokenizer: Any,
        *,
        eos_token_ids: Sequence[int] | None = None,
        check_tokenizer: bool = True,
    ) -> None:
        if not isinstance(endpoint, CompletionsEndpoint):
            raise TypeError(
                f"endpoint must be a CompletionsEndpoint, got {type(endpoint).__name__}"
            )
        if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
            raise TypeError("tokenizer must be a transformers tokenizer")
        super().__init__(tokenizer)
        self.endpoint = endpoint
        self._vocab = len(tokenizer)
        eos = tokenizer.eos_token_id if eos_token_ids is None else eos_token_ids
        found = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if not found or not all(
            isinstance(e, int) and not isinstance(e, bool) and 0 <= e < self._vocab for e in found
        ):
            # a bare "stop" with no EOS id would otherwise fail mid-answer, after spends
            raise ValueError(
                f"eos_token_ids must be token ids in [0, {self._vocab}) (at least one; the "
                f"tokenizer's eos_token_id when None), got {eos!r}"
            )
        self._eos = frozenset(found)
        if check_tokenizer:
            self._check_tokenizer()

    @classmethod
    def from_pretrained(
        cls,
        base_url: str,
        tokenizer: str,
        *,
        model: str,
        server: Server = "llama.cpp",
        check_tokenizer: bool = True,
        **endpoint_options: Any,
    ) -> OpenAICompatModel:
        """Connect to ``base_url`` serving ``model``; load ``tokenizer`` (name or path) locally.

        ``endpoint_options`` go to :class:`CompletionsEndpoint` (``api_key``,
        ``headers``, ``verify``, ``timeout``, ``retries``, ...).
        """
        from transformers import AutoTokenizer

        endpoint = CompletionsEndpoint(base_url, model=model, server=server, **endpoint_options)
        return cls(
            endpoint, AutoTokenizer.from_pretrained(tokenizer), check_tokenizer=check_tokenizer
        )

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self.endpoint!r})"

    def _check_tokenizer(self) -> None:
        served = self.endpoint.tokenize(TOKENIZER_PROBE)
        if served is not None and served != self.encode(TOKENIZER_PROBE):
            raise ValueError(
                "the server's tokenizer disagrees with the local tokenizer on a probe text: "
                "is the server serving the same checkpoint as `tokenizer`?"
            )

    @property
    def vocab_size(self) -> int:
        """Number V of the tokenizer's tokens (ids 0..V-1)."""
        return self._vocab

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Token ids that end generation."""
        return self._eos

    def tokens(self, completion: Completion, n: int) -> list[int]:
        """The ``n`` greedy tokens of a completion asked for ``n`` tokens.

        A completion that stopped early (``finish_reason`` "stop": an EOS, returned
        or not) reads EOS from there on: its EOS where the server returned one, the
        smallest EOS id where it returned none (a bare stop), then the smallest EOS
        id. Anything else (an id out of range, more than ``n`` ids, fewer without a
        stop) is an :class:`EndpointError` naming no token.

        >>> model.tokens(Completion((17,), "stop"), 3)  # doctest: +SKIP
        [17, 0, 0]
        """
        ids = list(completion.token_ids)
        stopped = completion.finish_reason == "stop"
        if (
            len(ids) > n
            or (len(ids) < n and not stopped)
            or not all(0 <= t < self._vocab for t in ids)
        ):
            raise EndpointError(
                f"the server returned no token id in [0, {self._vocab}) "
                f"(expected {n} token ids or a stop)"
            )
        end = next((i + 1 for i, t in enumerate(ids) if t in self._eos), len(ids))
        return ids[:end] + [min(self._eos)] * (n - end)

    def prefill(self, prompts: Sequence[str]) -> OpenAICompatSession:
        """Tokenize B prompts locally; the first :meth:`~OpenAICompatSession.greedy` sends them."""
        return OpenAICompatSession(self, self.prompt_rows(prompts))

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One greedy completion per prompt, in one batched request (new text only)."""
        limit = positive_int("max_new_tokens", max_new_tokens)
        done = self.endpoint.complete(self.prompt_rows(prompts), max_tokens=limit)
        out = []
        for c in done:
            ids = list(c.token_ids)
            cut = next((i for i, tok in enumerate(ids) if tok in self._eos), len(ids))
            out.append(self.decode(ids[:cut]))
        return out

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """:meth:`generate` in a worker thread (the event loop stays free)."""
        return await asyncio.to_thread(self.generate, prompts, max_new_tokens=max_new_tokens)
