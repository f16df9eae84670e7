"""Streaming decoded text token by token without splitting a character.

Shared by every token-level mechanism (baselines, the voting mechanisms, DP-ICL):
released text is streamed as it is decoded; multi-byte characters are held back
until complete.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IncrementalDecoder"]


class IncrementalDecoder:
    """Turns a growing token list into text chunks, never splitting a character.

    A chunk is released only when the decoded text extends what was released and
    does not end in U+FFFD (an incomplete multi-byte sequence).

    >>> class Bytes:
    ...     def decode(self, ids): return bytes(ids).decode("utf-8", errors="replace")
    >>> d = IncrementalDecoder(Bytes())
    >>> [d.push(b) for b in "é!".encode()], d.text
    (['', 'é', '!'], 'é!')
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._ids: list[int] = []
        self._released = ""

    def push(self, token: int) -> str:
        """Add one token; return the newly releasable text ('' if none yet)."""
        self._ids.append(int(token))
        text = str(self._model.decode(self._ids))
        if text.endswith("\ufffd") or not text.startswith(self._released):
            return ""
        chunk = text[len(self._released) :]
        self._released = text
        return chunk

    def flush(self) -> str:
        """Release whatever is left at the end of generation."""
        text = str(self._model.decode(self._ids))
        chunk = text[len(self._released) :] if text.startswith(self._released) else ""
        self._released = text
        return chunk

    @property
    def text(self) -> str:
        """The full decoded text so far."""
        return str(self._model.decode(self._ids))
