"""Model protocols: greedy tokens, full distributions, and text generation.

Token-level mechanisms drive a :class:`TokenModel`: one batched prefill of B
prompts, then per generated token ``session.greedy()`` (each row's greedy
token: B integers) and ``session.step(token)`` (append the *same* token to every
row). That is all voting needs (DPVote, DPSparseVote, VoteRAG, the greedy
baselines): a backend moves O(B) numbers per step, never a [B, V] matrix, and a
backend that only knows each row's greedy token (e.g. an OpenAI-compatible
server at temperature 0) can implement it.

Mechanisms that read full next-token distributions (DP-ICL, kNN-Prompting keys)
need a :class:`LogprobModel`, whose :meth:`~LogprobModel.prefill_logprobs`
session also has ``logprobs`` [B, V]. Text-level mechanisms (DP-KSA) need only a
:class:`TextModel`; they read it through
:func:`~dprag_core.models.outcomes.generate_each` (one outcome per prompt, a
fixed request schedule), which a :class:`PerPromptTextModel` serves in one call.

Prompts passed to all of them are *user messages*; an implementation wraps them
with the tokenizer's chat template when it has one, else uses them verbatim.

>>> class Echo:  # every row's greedy token is 0
...     vocab_size, eos_token_ids = 2, frozenset({1})
...     def encode(self, text): return [0]
...     def decode(self, ids): return ""
...     def prefill(self, prompts): return Rows(len(prompts))
>>> class Rows:
...     def __init__(self, b): self.b = b
...     def greedy(self): return np.zeros(self.b, dtype=np.intp)
...     def step(self, token): pass
>>> isinstance(Echo(), TokenModel), isinstance(Echo(), LogprobModel)
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "LogprobModel",
    "LogprobSession",
    "LookaheadModel",
    "LookaheadSession",
    "PerPromptTextModel",
    "StopRule",
    "TextModel",
    "TokenModel",
    "TokenSession",
    "stop_width",
]

#: ``stop(tokens)``: whether a lookahead may stop, given every row's tokens so far [B, j].
StopRule = Callable[[npt.NDArray[np.intp]], bool]


@runtime_checkable
class TokenSession(Protocol):
    """The decoding state of one batch of B prompts (e.g. a persistent KV cache)."""

    def greedy(self) -> npt.NDArray[np.intp]:
        """Each row's greedy (argmax, ties to the lower id) next token, shape [B]."""
        ...

    def step(self, token: int) -> None:
        """Append ``token`` to every row."""
        ...


@runtime_checkable
class LookaheadSession(TokenSession, Protocol):
    """A :class:`TokenSession` that can show each row's own greedy continuation.

    Word-level voting (``unit="word"`` of the voting mechanisms) asks every row
    for its next word: several greedy tokens per row, each row its own, after
    which the session must be exactly as before (the chosen word is then appended
    to every row with :meth:`extend`). A model declares that its sessions can look
    ahead by implementing :class:`LookaheadModel`
    (:func:`~dprag_core.models.checks.check_lookahead_model` checks it when a
    word-level mechanism is built).

    >>> s = model.prefill(["Q: who treats headache?", "Q: and migraine?"])  # doctest: +SKIP
    >>> s.lookahead(4).shape, s.lookahead(4, stop=lambda t: t.shape[1] == 2).shape  # doctest: +SKIP
    ((2, 4), (2, 2))
    """

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` (at least one) to every row, like one
        :meth:`step` per token; a backend may run them in one forward."""
        ...

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        """Each row's greedy continuation of up to ``n`` tokens, shape [B, j], 1 <= j <= n.

        Column 0 is :meth:`greedy`; column t is row r's greedy token after its own
        columns 0..t-1 were appended to row r alone. Decoding stops after ``n``
        tokens, or as soon as ``stop(tokens so far)`` is true. Afterwards the
        session is as it was: ``greedy()`` and ``step()`` behave as if
        ``lookahead`` had not been called.
        """
        ...


def stop_width(columns: npt.NDArray[np.intp], stop: StopRule | None) -> int:
    """How many of ``columns`` [B, n] a lookahead checking ``stop`` after each one returns.

    For a backend that decodes all n columns at once (a server request) and
    applies ``stop`` afterwards: the j of a lookahead that stopped early.

    >>> stop_width(np.array([[5, 0, 7]]), lambda t: bool((t[:, -1] == 0).all()))
    2
    >>> stop_width(np.array([[5, 0, 7]]), None)
    3
    """
    width = 1
    while width < columns.shape[1] and not (stop and stop(columns[:, :width])):
        width += 1
    return width


@runtime_checkable
class LogprobSession(TokenSession, Protocol):
    """A :class:`TokenSession` that also exposes full next-token distributions."""

    @property
    def logprobs(self) -> npt.NDArray[np.float32]:
        """Next-token log-probabilities of every row, shape [B, V]."""
        ...


@runtime_checkable
class TokenModel(Protocol):
    """A causal LM that decodes batches of prompts in lockstep, greedy tokens per row."""

    @property
    def vocab_size(self) -> int:
        """Number V of token ids the model can emit (ids are 0..V-1)."""
        ...

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Token ids that end generation."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens skipped)."""
        ...

    def prefill(self, prompts: Sequence[str]) -> TokenSession:
        """Encode B user-message prompts in one batch and return their session."""
        ...


@runtime_checkable
class LogprobModel(TokenModel, Protocol):
    """A :class:`TokenModel` that can also return full next-token distributions."""

    def prefill_logprobs(self, prompts: Sequence[str]) -> LogprobSession:
        """Like :meth:`TokenModel.prefill`, with ``logprobs`` available on the session."""
        ...


@runtime_checkable
class LookaheadModel(TokenModel, Protocol):
    """A :class:`TokenModel` whose sessions are :class:`LookaheadSession` s (word-level voting).

    The declaration is :meth:`check_lookahead`: a model that has it says that its
    ``prefill`` returns sessions that can look ahead, and the method refuses
    (``ValueError``/``TypeError``, with the fix) a configuration whose sessions could
    not do it exactly. A subclass of a lookahead model whose sessions cannot look
    ahead sets ``check_lookahead = None``.

    >>> class Rows:
    ...     vocab_size, eos_token_ids = 2, frozenset({1})
    ...     def encode(self, text): return [0]
    ...     def decode(self, ids): return ""
    ...     def prefill(self, prompts): ...
    >>> class Ahead(Rows):
    ...     def check_lookahead(self): pass
    >>> isinstance(Rows(), LookaheadModel), isinstance(Ahead(), LookaheadModel)
    (False, True)
    """

    def prefill(self, prompts: Sequence[str]) -> LookaheadSession:
        """Like :meth:`TokenModel.prefill`; the session can look ahead."""
        ...

    def check_lookahead(self) -> None:
        """Refuse, before any query, a model whose sessions cannot look ahead exactly."""
        ...


@runtime_checkable
class TextModel(Protocol):
    """Anything that turns user-message prompts into completions, in a batch."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per prompt, in order."""
        ...


@runtime_checkable
class PerPromptTextModel(TextModel, Protocol):
    """A :class:`TextModel` that reports each prompt's own outcome, in one call.

    ``generate_each`` sends exactly what ``generate`` sends (the same requests,
    whatever any of them returns) and gives, per prompt, its completion or
    ``None`` where that prompt's own request failed (a hosted API's content
    filter, a tokenizer refusing a special token), the error dropped. It never
    sends a prompt again. It raises only for what is not one prompt's (a bad
    argument, a batch the model runs as one: the in-process engines).

    >>> class Filtered:
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["ok"] * len(prompts)
    ...     def generate_each(self, prompts, *, max_new_tokens=64):
    ...         return [None if "forbidden" in p else "ok" for p in prompts]
    >>> isinstance(Filtered(), PerPromptTextModel)
    True
    """

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """One outcome per prompt, in order: its completion, or None where it failed."""
        ...
