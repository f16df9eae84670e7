"""Text <-> token ids with a transformers tokenizer; the special tokens every token model shares.

:class:`TokenizerCodec` is what a :class:`~dprag_core.models.base.TokenModel`
does with its tokenizer: ``encode`` / ``decode`` (no special tokens),
``decode_answer`` (the same, without an incomplete or invalid UTF-8 byte
anywhere: :func:`complete_text`),
``prompt_ids`` (a user-message prompt wrapped with the tokenizer's chat template
when it has one, else encoded verbatim with the tokenizer's usual special tokens)
and ``prompt_rows`` (a batch of them, checked). A token model that sets its
public ``prompt_width`` has every prompt cut to its last
:func:`~dprag_core.models.envelope.prompt_bytes` UTF-8 bytes *before* it is
tokenized (:mod:`dprag_core.models.envelope`, *bytes first*); nothing here asks
the tokenizer for its length warning (``verbose=False``).

:func:`special_tokens` is the one home of what a token model reads from its
tokenizer and configs once: the vocabulary size, the end-of-sequence set, the
padding id (:class:`SpecialTokens`). :class:`~dprag_core.models.hf.HFTokenModel`
and :class:`~dprag_core.models.openai_compat.OpenAICompatModel` both resolve
theirs here, so the same checkpoint stops on the same tokens in process and on
a server. :func:`word_starts` is the public word-start table of word-level voting.
:func:`check_token_ids` is the one check of token ids, wherever they come from.

>>> class Chars:  # a toy tokenizer: one id per character
...     chat_template = None
...     def encode(self, text, add_special_tokens=True, **kw): return [ord(c) for c in text]
...     def decode(self, ids, skip_special_tokens=True): return "".join(map(chr, ids))
>>> codec = TokenizerCodec(Chars())
>>> codec.prompt_ids("hi"), codec.decode(codec.encode("ok"))
([104, 105], 'ok')
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
import numpy.typing as npt

from dprag_core.models.envelope import keep_last_bytes, prompt_bytes, work_filler

__all__ = [
    "PENDING_TOKENS",
    "REPLACEMENT",
    "SpecialTokens",
    "TokenizerCodec",
    "check_prompts",
    "check_token_ids",
    "complete_text",
    "end_of_turn",
    "special_tokens",
    "token_id_problem",
    "word_starts",
]

#: U+FFFD, what a decoder shows for bytes that are not (yet) a whole UTF-8 character.
REPLACEMENT = "\ufffd"

#: The last tokens of a text that can hold an incomplete character's bytes: a UTF-8
#: character has at most 4 bytes, so at most 3 of them are waiting for the rest, and
#: every token carries at least one byte.
PENDING_TOKENS = 3

#: Content of the assistant message rendered to find a chat template's end-of-turn token.
_TURN_PROBE = "dprag end-of-turn probe"


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


def check_token_ids(
    tokens: Iterable[object],
    vocab_size: int,
    *,
    name: str = "tokens",
    error: type[Exception] = ValueError,
    allow_empty: bool = False,
) -> list[int]:
    """``tokens`` as ints, each an integer in [0, vocab_size) (``error`` otherwise).

    The one check of token ids, wherever they come from: tokens a mechanism
    appends (``step``/``extend`` of every session) and ids a server returns
    (``error=EndpointError``). A ``bool`` (JSON ``true``), a float, a negative
    or huge id is refused; at least one id unless ``allow_empty``. The message
    says how many ids came and which rule failed, never the ids themselves (a
    server's ids are its reading of private prompts).

    >>> check_token_ids([3, 1], 4)
    [3, 1]
    >>> check_token_ids([], 4)
    Traceback (most recent call last):
    ValueError: tokens must be at least one token id in [0, 4), got none
    >>> check_token_ids([True], 4)
    Traceback (most recent call last):
    ValueError: tokens must be at least one token id in [0, 4), got 1 id(s), one not an integer
    """
    ids = list(tokens)
    rule = f"{name} must be {'token ids' if allow_empty else 'at least one token id'}"
    if not ids and not allow_empty:
        raise error(f"{rule} in [0, {vocab_size}), got none")
    problem = token_id_problem(ids, vocab_size)
    if problem:
        raise error(f"{rule} in [0, {vocab_size}), got {len(ids)} id(s), {problem}")
    return [int(t) for t in ids]  # type: ignore[call-overload]


def token_id_problem(ids: Sequence[object], vocab_size: int) -> str:
    """What is wrong with ``ids`` as token ids in [0, vocab_size) ('' if nothing), naming no id.

    >>> token_id_problem([1, True, 2], 4), token_id_problem([-1], 4), token_id_problem([3], 4)
    ('one not an integer', 'one out of range', '')
    """
    for t in ids:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, Integral):
            return "one not an integer"
        if not 0 <= int(t) < vocab_size:
            return "one out of range"
    return ""


def complete_text(decode: Callable[[Sequence[int]], str], ids: Sequence[int]) -> str:
    """The text of ``ids`` without an incomplete or invalid UTF-8 byte anywhere.

    The text of ``ids`` without its last tokens (at most :data:`PENDING_TOKENS`),
    the fewest that leave no trailing U+FFFD: the bytes of a character cut by a
    length limit go, with any whole character the same tokens held. Then every
    U+FFFD left is dropped: bytes that are no character (a lead byte followed by
    text, a stray continuation byte) are **cut** from the text wherever they are,
    never shown as U+FFFD. This is a fixed function of the released tokens
    (post-processing), so the text is as private as the tokens are.

    >>> def decode(ids): return bytes(ids).decode("utf-8", errors="replace")
    >>> complete_text(decode, list("p€".encode())[:3]), complete_text(decode, [255, 255])
    ('p', '')
    >>> complete_text(decode, list(b"eln\\xe2 phone"))
    'eln phone'
    """
    for cut in range(len(ids), max(len(ids) - PENDING_TOKENS, 0) - 1, -1):
        text = decode(ids[:cut])
        if not text.endswith(REPLACEMENT):
            return text.replace(REPLACEMENT, "")
    return decode(ids).replace(REPLACEMENT, "")


@dataclass(frozen=True)
class SpecialTokens:
    """What a token model reads once from its tokenizer and configs.

    ``vocab_size``: the number V of real tokens (ids 0..V-1; logit rows past the
    tokenizer are padding, not tokens); ``eos_token_ids``: the ids that end an
    answer (:func:`special_tokens` says how the set is chosen); ``pad_token_id``:
    the tokenizer's padding id, else the smallest end id (else 0).

    >>> SpecialTokens(vocab_size=5, eos_token_ids=frozenset({4}), pad_token_id=4).pad_token_id
    4
    """

    vocab_size: int
    eos_token_ids: frozenset[int]
    pad_token_id: int


def _ids(value: object) -> list[object]:
    """An ``eos_token_id`` setting (None, one id or a list) as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]


def end_of_turn(tokenizer: Any) -> int | None:
    """The special token a chat template puts right after an assistant message, if any.

    ``<|im_end|>`` (ChatML: Qwen2, SmolLM2), ``<|eot_id|>`` (Llama 3),
    ``<end_of_turn>`` (Gemma), ``<|end|>`` (Phi-3): read from the template itself
    (a rendered two-message chat), so no list of names is kept. None without a
    chat template, or when the template puts no special token there.
    """
    if not getattr(tokenizer, "chat_template", None):
        return None
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _TURN_PROBE}]
    try:
        text = str(tokenizer.apply_chat_template(chat, tokenize=False))
    except Exception:  # a template that refuses this chat shape: no end-of-turn read from it
        return None
    at = text.rfind(_TURN_PROBE)
    if at < 0:
        return None
    after = list(tokenizer.encode(text[at + len(_TURN_PROBE) :], add_special_tokens=False))
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = set(getattr(tokenizer, "all_special_ids", [])) | {
        int(i) for i, token in added.items() if getattr(token, "special", False)
    }
    return int(after[0]) if after and after[0] in special else None


def special_tokens(
    tokenizer: Any,
    *,
    configs: Sequence[Any] = (),
    logit_rows: int | None = None,
    eos_token_ids: Sequence[int] | None = None,
) -> SpecialTokens:
    """The :class:`SpecialTokens` of one checkpoint: its tokenizer and configs.

    **End-of-sequence set** (the one policy of every token model): the union of
    the tokenizer's ``eos_token_id``, the ``eos_token_id`` (one id or a list) of
    each of ``configs`` (the model config, the generation config: where
    instruct checkpoints list their end-of-turn token beside the base EOS), and
    the chat template's end-of-turn token (:func:`end_of_turn`: the template
    prompts are built with is also how the model ends its turn); ids outside
    [0, V) are dropped. ``eos_token_ids`` replaces the whole set (at least one id,
    each checked). A checkpoint that names no end id gets an empty set: its
    answers stop at their length limit only (the server client refuses that: a
    server's bare stop could not be read).

    ``vocab_size`` is ``len(tokenizer)``, or ``logit_rows`` when smaller (a model
    whose output layer has fewer rows than the tokenizer has tokens).

    >>> from types import SimpleNamespace
    >>> class Tok:
    ...     eos_token_id, pad_token_id, chat_template = 1, None, None
    ...     def __len__(self): return 6
    >>> special = special_tokens(Tok(), configs=[SimpleNamespace(eos_token_id=[1, 5])])
    >>> special.eos_token_ids, special.pad_token_id, special.vocab_size
    (frozenset({1, 5}), 1, 6)
    """
    vocab = len(tokenizer) if logit_rows is None else min(len(tokenizer), int(logit_rows))
    if eos_token_ids is not None:
        try:
            eos = check_token_ids(list(eos_token_ids), vocab, name="eos_token_ids")
        except (ValueError, TypeError):
            raise ValueError(
                f"eos_token_ids must be token ids in [0, {vocab}) (at least one; None reads "
                f"them from the tokenizer, configs and chat template), got {eos_token_ids!r}"
            ) from None
    else:
        found = _ids(getattr(tokenizer, "eos_token_id", None))
        for config in configs:
            found += _ids(getattr(config, "eos_token_id", None))
        found += _ids(end_of_turn(tokenizer))
        eos = [
            int(t)
            for t in found
            if isinstance(t, Integral) and not isinstance(t, bool) and 0 <= int(t) < vocab
        ]
    pad = getattr(tokenizer, "pad_token_id", None)
    pad_id = int(pad) if isinstance(pad, int) and 0 <= pad < vocab else min(eos, default=0)
    return SpecialTokens(vocab_size=vocab, eos_token_ids=frozenset(eos), pad_token_id=pad_id)


#: The word-start table of each model (public: a function of the tokenizer only).
_WORD_STARTS: weakref.WeakKeyDictionary[Any, npt.NDArray[np.bool_]] = weakref.WeakKeyDictionary()


def word_starts(model: Any) -> npt.NDArray[np.bool_]:
    """One public bit per token id: whether the token starts a new word (or ends the text).

    A token starts a word when its text, decoded after another token, begins with
    whitespace, or when it is an end id (``model.eos_token_ids``): the word rule
    of word-level voting (:mod:`dprag_core.algorithms._words`). Computed up front
    from ``model.encode``/``decode`` over the whole vocabulary (a cache filled
    while answering would record which tokens the voters proposed), once per
    model: every mechanism built on the model shares it.

    >>> class Chars:  # one token per character, EOS = 0
    ...     eos_token_ids, vocab_size = frozenset({0}), 128
    ...     def encode(self, text): return [ord(c) for c in text]
    ...     def decode(self, ids): return "".join(chr(i) for i in ids if i)
    >>> table = word_starts(Chars())
    >>> bool(table[ord(" ")]), bool(table[ord("a")]), bool(table[0])
    (True, False, True)
    """
    try:
        table = _WORD_STARTS.get(model)
    except TypeError:  # a model that cannot be weakly referenced
        table = None
    if table is not None:
        return table
    eos = model.eos_token_ids
    anchor = list(model.encode("a"))
    anchor_text = str(model.decode(anchor))

    def starts(token: int) -> bool:
        text = str(model.decode([*anchor, token]))
        added = text[len(anchor_text) :] if text.startswith(anchor_text) else text
        return token in eos or added[:1].isspace()

    table = np.array([starts(t) for t in range(model.vocab_size)], dtype=bool)
    with contextlib.suppress(TypeError):
        _WORD_STARTS[model] = table
    return table


class TokenizerCodec:
    """Encoding, decoding and prompt building with one transformers ``tokenizer``."""

    prompt_width: int | None = None
    """The public width of a token model's prompts (tokens); when set, every prompt keeps
    its last ``prompt_bytes(prompt_width)`` UTF-8 bytes before it is tokenized."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, verbose=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens skipped."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def decode_answer(self, ids: Sequence[int]) -> str:
        """:meth:`decode`, without an incomplete or invalid UTF-8 byte (:func:`complete_text`).

        For a whole answer (text generation): a limit that cut a character's
        bytes in two drops the part that came, and invalid bytes anywhere are
        cut, instead of releasing U+FFFD.
        """
        return complete_text(self.decode, ids)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The token ids fed to the model for one user-message ``prompt``.

        With a ``prompt_width``, only the prompt's last ``prompt_bytes(prompt_width)``
        UTF-8 bytes are wrapped and tokenized (the engines then keep the last
        ``prompt_width`` tokens), and :func:`~dprag_core.models.envelope.work_filler`
        of the bytes the prompt lacks is tokenized and thrown away: the tokenizer's
        work is that of ``prompt_bytes(prompt_width)`` bytes whatever the prompt's
        length (a public number).

        >>> class Bytes:
        ...     chat_template = None
        ...     def encode(self, text, **kw): return list(text.encode())
        >>> codec = TokenizerCodec(Bytes())
        >>> codec.prompt_width = 1  # at most 16 bytes are tokenized
        >>> len(codec.prompt_ids("x" * 10**6))
        16
        """
        if self.prompt_width is not None:
            bound = prompt_bytes(self.prompt_width)
            prompt = keep_last_bytes(prompt, bound)
            lacking = bound - len(prompt.encode("utf-8", errors="surrogatepass"))
            self.tokenizer.encode(work_filler(lacking), add_special_tokens=False, verbose=False)
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False, verbose=False))
        return list(self.tokenizer.encode(prompt, verbose=False))

    def prompt_rows(self, prompts: Sequence[str]) -> list[list[int]]:
        """:meth:`prompt_ids` of each of B prompts (each must encode to a token at least)."""
        rows = [self.prompt_ids(p) for p in check_prompts(prompts)]
        if any(not r for r in rows):
            raise ValueError("every prompt must encode to at least one token")
        return rows
