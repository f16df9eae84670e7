"""Model protocols: token-level (logits) and text-level (generation only).

Token-level mechanisms (DPVote, DPSparseVote, DPICL, MuRAG) drive a
:class:`TokenModel`: one batched prefill of B prompts, then ``step(token)``
appends the *same* token to every row and returns the next-token
log-probabilities of every row. Text-level mechanisms (DP-KSA) need only a
:class:`TextModel`.

Prompts passed to both are *user messages*; an implementation wraps them with
the tokenizer's chat template when it has one, else uses them verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["TextModel", "TokenModel", "TokenSession"]


@runtime_checkable
class TokenSession(Protocol):
    """The decoding state of one batch of prompts (a persistent KV cache)."""

    @property
    def logprobs(self) -> npt.NDArray[np.float32]:
        """Next-token log-probabilities of every row, shape [B, V]."""
        ...

    def step(self, token: int) -> npt.NDArray[np.float32]:
        """Append ``token`` to every row; return the new [B, V] log-probabilities."""
        ...


@runtime_checkable
class TokenModel(Protocol):
    """A causal LM exposing batched next-token log-probabilities."""

    @property
    def vocab_size(self) -> int:
        """Size V of the log-probability rows."""
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
class TextModel(Protocol):
    """Anything that turns user-message prompts into completions, in a batch."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One completion per prompt, in order."""
        ...
