"""The public envelope of a model endpoint: how long a prompt is, and how much room is left.

Whatever a model endpoint receives must have a shape that depends on public
numbers only, never on the documents: a long document must not make a request
longer than its neighbour's would be, and above all must not make the endpoint
refuse it (a server answers HTTP 400 to a prompt over its context; that
failure would tell whether the document is in the corpus). One rule serves
every engine, in process and on a server:

- **Bytes first.** Before anything tokenizes it, a prompt keeps its last
  :func:`prompt_bytes` ``(prompt_width)`` = :data:`PROMPT_BYTES_PER_TOKEN` x
  ``prompt_width`` UTF-8 bytes, cut at a character boundary
  (:func:`keep_last_bytes`; a chat template is applied to the cut message).
  Only those bytes are tokenized, so the work of a query (bytes read, tokens
  made, memory) is bounded by public numbers and does not grow with a
  retrieved document's length, and the tokenizer never sees a sequence long
  enough for transformers' "Token indices sequence length is longer than ..."
  warning (which every engine also switches off: ``verbose=False``). A
  prompt shorter than that is followed by :func:`work_filler` for the bytes
  it lacks, tokenized and thrown away: every row costs the tokenizer
  ``prompt_bytes(prompt_width)`` bytes, so a long document's row takes no
  longer to tokenize than a short one's (for prose; the tokenizer's work per
  byte still varies a little with what the text is).
- **Width.** The tokens of that end keep their last ``prompt_width``
  (:func:`keep_last`; the question and the answer cue end every prompt).
  ``prompt_width`` is a public parameter of the model; by default
  :data:`DEFAULT_PROMPT_WIDTH` tokens, or half the model's context if that is
  less (:func:`public_width`). A prompt whose last ``prompt_width`` tokens take
  at most ``prompt_bytes(prompt_width)`` bytes (prose: 3 to 6 bytes a token)
  keeps exactly the tokens it kept without the byte cut (the cut falls words
  before them, and a tokenizer's pieces do not reach across words). A text
  whose tokens average more bytes than that (long runs of one character or of
  whitespace merged into long tokens) keeps fewer than ``prompt_width``
  tokens: those of its last ``prompt_bytes(prompt_width)`` bytes. Either way
  what the model reads of a prompt is a function of that prompt alone (one
  voter's or one unit's documents, the public question and template) and the
  public width, whatever the other prompts hold, so each mechanism's argument
  ("one unit changes one row") is unchanged.
- **Room.** The model's context (``max_position_embeddings`` in process, the
  server's per-request context on a server) must hold a prompt of the full
  width plus the answer: ``answer_room = context - prompt_width`` new tokens
  (:func:`answer_room`). A mechanism whose answer could be longer is refused
  when it is built (:func:`check_answer_room`), and a model whose context is
  not above its width is refused when it is built; nothing is discovered per
  query.
- **Text-only models** (a hosted API behind LangChain or LlamaIndex:
  ``LangChainTextModel``, ``LlamaIndexTextModel``) take text, not token ids: a
  prompt keeps its last ``max_prompt_bytes`` UTF-8 bytes, cut at a character
  boundary (:func:`keep_last_bytes`). A provider refuses a prompt over its
  context window, and that refusal would say that a long document was
  retrieved. A byte-level tokenizer (GPT, Llama 3, Qwen) or one with byte
  fallback (Llama 2, Mistral) makes at most one token per byte, so such a prompt
  is at most ``max_prompt_bytes`` tokens plus the chat template's own: set it
  below the model's context window minus the answer's ``max_new_tokens``.

>>> keep_last([[1, 2, 3], [4]], 2)
[[2, 3], [4]]
>>> public_width(None, context=1024), public_width(None, context=300)
(256, 150)
>>> keep_last_bytes("naïve", 4)
'ïve'
>>> prompt_bytes(256)
4096
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag_core.validation import positive_int

__all__ = [
    "DEFAULT_PROMPT_BYTES",
    "DEFAULT_PROMPT_WIDTH",
    "PROMPT_BYTES_PER_TOKEN",
    "answer_room",
    "check_answer_room",
    "keep_last",
    "keep_last_bytes",
    "prompt_bytes",
    "public_width",
    "work_filler",
]

DEFAULT_PROMPT_WIDTH = 256
"""Tokens a prompt keeps by default (or half the model's context, if that is less)."""

DEFAULT_PROMPT_BYTES = 16384
"""UTF-8 bytes a text-only model's prompt keeps by default (at most that many tokens
with a byte-level tokenizer, plus the chat template's)."""


PROMPT_BYTES_PER_TOKEN = 16
"""UTF-8 bytes a token engine reads per token of ``prompt_width`` (:func:`prompt_bytes`)."""


def prompt_bytes(width: int) -> int:
    """The UTF-8 bytes of a prompt a token engine tokenizes: its last ``16 * width``.

    A public function of the public width alone (module docstring, *bytes first*).

    >>> prompt_bytes(64)
    1024
    """
    return PROMPT_BYTES_PER_TOKEN * positive_int("prompt_width", width)


_FILLER = "the clinic notes each visit, the dose given and the date of the next one. "


def work_filler(n_bytes: int) -> str:
    """``n_bytes`` bytes of public ASCII prose, tokenized and thrown away to pad work.

    A token engine tokenizes a prompt's last :func:`prompt_bytes` bytes and then this
    filler for the bytes the prompt lacks, so every row's tokenizer work is that of
    ``prompt_bytes(prompt_width)`` bytes of prose, whatever the documents' lengths
    (module docstring, *bytes first*).

    >>> work_filler(9), len(work_filler(1000))
    ('the clini', 1000)
    """
    if n_bytes <= 0:
        return ""
    return (_FILLER * (n_bytes // len(_FILLER) + 1))[:n_bytes]


def public_width(width: int | None, *, context: int | None, source: str = "context") -> int:
    """The public prompt width: ``width`` if it leaves room to answer in ``context``.

    ``None`` is :data:`DEFAULT_PROMPT_WIDTH`, or ``context // 2`` if that is less;
    a given width must be in [1, context - 1] (``context`` None: any positive int).
    ``source`` names the context in the error (e.g. ``max_position_embeddings``).

    >>> public_width(64, context=64, source="server's context")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: prompt_width must be in [1, 63] (below the server's context=64, ...), got 64
    """
    if width is None:
        return DEFAULT_PROMPT_WIDTH if context is None else min(DEFAULT_PROMPT_WIDTH, context // 2)
    width = positive_int("prompt_width", width)
    if context is not None and width >= context:
        raise ValueError(
            f"prompt_width must be in [1, {context - 1}] (below the {source}={context}, "
            f"leaving room for the answer), got {width}"
        )
    return width


def keep_last(rows: Sequence[Sequence[int]], width: int) -> list[list[int]]:
    """Each row's last ``width`` tokens (the whole row when it is shorter): the one rule.

    A function of the row's own tokens and the public width, whatever the other rows hold.
    """
    return [list(row[-width:]) for row in rows]


def keep_last_bytes(text: str, max_bytes: int) -> str:
    """The longest end of ``text`` that is at most ``max_bytes`` UTF-8 bytes (whole characters).

    Reads only the last ``max_bytes`` characters of ``text``, whatever its length.

    >>> keep_last_bytes("€uro", 4), keep_last_bytes("€uro", 6), keep_last_bytes("ab", 9)
    ('uro', '€uro', 'ab')
    """
    # every character is at least one byte: the last max_bytes characters hold the answer,
    # so only they are encoded (the work is bounded by max_bytes, not by the text)
    data = text[-max_bytes:].encode("utf-8", errors="surrogatepass")
    if len(data) <= max_bytes and len(text) <= max_bytes:
        return text
    tail = data[len(data) - max_bytes :]
    while tail and (tail[0] & 0xC0) == 0x80:  # a continuation byte: the character was cut
        tail = tail[1:]
    return tail.decode("utf-8", errors="surrogatepass")


def answer_room(model: object) -> int | None:
    """How many new tokens a row of ``model`` may hold after a full-width prompt (None: no
    bound known): ``model.answer_room`` when the model states one."""
    room = getattr(model, "answer_room", None)
    return room if isinstance(room, int) and not isinstance(room, bool) else None


def check_answer_room(
    model: object, max_new_tokens: int, *, parameter: str = "max_new_tokens"
) -> int:
    """``max_new_tokens`` if a full-width prompt and that many new tokens fit the model's
    context; a ValueError naming the numbers and the fix otherwise (when the mechanism is
    built: a context limit is never discovered per query).

    >>> class Served:
    ...     prompt_width, context_length, answer_room = 200, 256, 56
    >>> check_answer_room(Served(), 56)
    56
    >>> check_answer_room(Served(), 64)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: max_new_tokens must be in [1, 56]: the model's context (256 tokens) holds ...
    """
    count = positive_int(parameter, max_new_tokens)
    room = answer_room(model)
    if room is not None and count > room:
        width = getattr(model, "prompt_width", "?")
        context = getattr(model, "context_length", "?")
        raise ValueError(
            f"{parameter} must be in [1, {room}]: the model's context ({context} tokens) holds "
            f"its prompt_width ({width}) and {room} new tokens; lower {parameter} or "
            "prompt_width, or give the model a longer context"
        )
    return count
