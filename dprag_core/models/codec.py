"""Text <-> token ids with a transformers tokenizer, as every token model needs them.

:class:`TokenizerCodec` is what a :class:`~dprag_core.models.base.TokenModel`
does with its tokenizer: ``encode`` / ``decode`` (no special tokens) and
``prompt_ids`` (a user-message prompt wrapped with the tokenizer's chat template
when it has one, else encoded verbatim with the tokenizer's usual special tokens)
and ``prompt_rows`` (a batch of them, checked).

>>> class Chars:  # a toy tokenizer: one id per character
...     chat_template = None
...     def encode(self, text, add_special_tokens=True): return [ord(c) for c in text]
...     def decode(self, ids, skip_special_tokens=True): return "".join(map(chr, ids))
>>> codec = TokenizerCodec(Chars())
>>> codec.prompt_ids("hi"), codec.decode(codec.encode("ok"))
([104, 105], 'ok')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TokenizerCodec", "check_prompts", "check_token_ids"]


def check_prompts(prompts: Sequence[str]) -> list[str]:
    """``prompts`` as a non-empty list of strings (TypeError / ValueError otherwise).

    >>> check_prompts("one prompt")
    Traceback (most recent call last):
    TypeError: prompts must be a sequence of strings, not a single string
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    out = list(prompts)
    if not out:
        raise ValueError("prompts must hold at least one prompt")
    if not all(isinstance(p, str) for p in out):
        raise TypeError("prompts must be a sequence of strings")
    return out


def check_token_ids(tokens: Sequence[int], vocab_size: int) -> list[int]:
    """``tokens`` as ints, at least one, each in [0, vocab_size) (ValueError otherwise).

    >>> check_token_ids([3, 1], 4)
    [3, 1]
    >>> check_token_ids([], 4)
    Traceback (most recent call last):
    ValueError: tokens must be at least one token id in [0, 4), got []
    """
    ids = [int(t) for t in tokens]
    if not ids or not all(0 <= t < vocab_size for t in ids):
        raise ValueError(
            f"tokens must be at least one token id in [0, {vocab_size}), got {tokens!r}"
        )
    return ids


class TokenizerCodec:
    """Encoding, decoding and prompt building with one transformers ``tokenizer``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens skipped."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def prompt_ids(self, prompt: str) -> list[int]:
        """The token ids fed to the model for one user-message ``prompt``."""
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(prompt))

    def prompt_rows(self, prompts: Sequence[str]) -> list[list[int]]:
        """:meth:`prompt_ids` of each of B prompts (each must encode to a token at least)."""
        rows = [self.prompt_ids(p) for p in check_prompts(prompts)]
        if any(not r for r in rows):
            raise ValueError("every prompt must encode to at least one token")
        return rows
