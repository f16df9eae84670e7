"""Streaming decoded text token by token, in bounded time, never releasing part of a character.

Shared by every token-level mechanism (baselines, the voting mechanisms, DP-ICL):
released text is streamed as it is decoded; a character whose UTF-8 bytes are
split over several tokens (byte-level BPE, byte fallback) is released once all
its bytes have come, and bytes that are no character are cut (never U+FFFD).
"""

from __future__ import annotations

from typing import Any

from dprag_core.models.codec import PENDING_TOKENS, REPLACEMENT

__all__ = ["CONTEXT", "IncrementalDecoder"]

#: Released tokens decoded before the new ones, so that a tokenizer renders them in
#: context (a leading space, a merge with the previous piece) as in the whole text.
CONTEXT = 4


class IncrementalDecoder:
    """Turns a growing token list into text chunks; each push decodes O(1) tokens.

    The tokens pushed so far are *released* (their text is out) up to a mark, and
    *pending* after it. Each :meth:`push` decodes one short window, a few
    released tokens of context and the pending ones, never the whole answer, so
    its cost does not grow with the answer's length (12 µs per token at 64
    tokens, 218 µs at 1024 when every push decoded every id). The pending tokens
    are released when the window's text does not end in U+FFFD, i.e. when they
    complete every character they began; a character's bytes are never released
    in part. More than :data:`~dprag_core.models.codec.PENDING_TOKENS` pending
    tokens whose text still ends in U+FFFD hold invalid bytes, not a character in
    progress: all but the last 3 are released. **Invalid bytes are cut**
    wherever they are (a lead byte followed by text, a stray continuation
    byte: what decoding shows as U+FFFD): a released chunk never holds U+FFFD.
    Which bytes are invalid is a fixed function of the released tokens
    (post-processing), so the text stays as private as the tokens; a voted
    token sequence can hold any bytes, which is why this rule exists.

    At the end of an answer, :meth:`flush` releases the pending tokens if they
    complete their characters, else the most of them that do: the tokens of a
    character cut by the length limit are **dropped** (with any whole character
    the same tokens held), never released as U+FFFD. :attr:`text` is exactly the
    concatenation of the released chunks.

    >>> class Bytes:
    ...     def decode(self, ids): return bytes(ids).decode("utf-8", errors="replace")
    >>> d = IncrementalDecoder(Bytes())
    >>> [d.push(b) for b in "é!".encode()], d.text
    (['', 'é', '!'], 'é!')
    >>> d = IncrementalDecoder(Bytes())
    >>> [d.push(b) for b in "p€".encode()[:2]], d.flush(), d.text
    (['p', ''], '', 'p')
    >>> d = IncrementalDecoder(Bytes())
    >>> [d.push(b) for b in b"n\\xe2 p"], d.text
    (['n', '', ' ', 'p'], 'n p')
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._ids: list[int] = []
        self._start = 0  # the window: ids[_start:]
        self._mark = 0  # ids[:_mark] are released
        self._shown = ""  # the text of ids[_start:_mark], as the window renders it
        self._parts: list[str] = []

    def _text(self, end: int) -> str:
        return str(self._model.decode(self._ids[self._start : end]))

    def _release(self, end: int, text: str) -> str:
        """Release ids[:end], whose window text is ``text``; move the window on."""
        chunk = text[len(self._shown) :].replace(REPLACEMENT, "")
        if chunk:
            self._parts.append(chunk)
        self._mark, self._shown = end, text
        if end - self._start > 2 * CONTEXT:  # keep CONTEXT released tokens of context
            self._start = end - CONTEXT
            self._shown = self._text(end)
        return chunk

    def push(self, token: int) -> str:
        """Add one token; return the newly releasable text ('' if none yet)."""
        self._ids.append(int(token))
        end = len(self._ids)
        text = self._text(end)
        if not text.endswith(REPLACEMENT):
            return self._release(end, text)
        if end - self._mark <= PENDING_TOKENS:  # may still complete a character
            return ""
        return self._release(end - PENDING_TOKENS, self._text(end - PENDING_TOKENS))

    def flush(self) -> str:
        """Release what is left at the end of generation, minus an incomplete character."""
        for end in range(len(self._ids), self._mark, -1):
            text = self._text(end)
            if not text.endswith(REPLACEMENT):
                return self._release(end, text)
        return ""

    @property
    def text(self) -> str:
        """The text released so far (every chunk, in order)."""
        return "".join(self._parts)
