"""Why an answer ended: the public vocabulary of ``DPAnswer.details["stop_reason"]``.

Every mechanism sets ``details["stop_reason"]`` to one of these strings, and
each is a function of what the mechanism DP-released (the chosen tokens, the
SVT/PTR outcomes, the released count), never of the documents on their own:

- ``"eos"``: the released text ended at an end-of-sequence token (chosen by the
  mechanism, like any other token).
- ``"max_tokens"``: ``max_new_tokens`` tokens were released.
- ``"budget"``: the per-query private-token limit (``c_max`` of DPVote /
  DPSparseVote) was spent.
- ``"null_token"``: the DP choice (of a token, a word or a whole answer)
  released ⊥ (LimitedDomain's "stop": nothing had a clear enough majority).
- ``"keywords"``: DP-KSA's PTR test passed; the answer was generated from the
  released keywords (and KSA, the non-private baseline, always ends so).
- ``"ptr_failed"``: DP-KSA's PTR test failed: no keyword was released and the
  answer is the model's zero-shot answer to the question alone.
- ``"answer"``: an answer-level vote (DPAnswerVote, AnswerVote) released one
  whole answer, the winning canonical key, in one decision.
- ``"text_model"``: a text model (an API) generated the answer in one call; why
  it stopped is the model's own affair (the non-private baselines on a
  :class:`~dprag_core.models.base.TextModel`).

There is deliberately no "no documents" reason: whether retrieval found
anything relevant is a fact about the private corpus, not a DP output.

An answer **released nothing** (:func:`released_nothing`) when its text is
empty or blank: ⊥ or EOS on the first token, for instance. The text is then
the empty string ``""`` (never ``None``); an app may opt in to a public
fallback (:mod:`dprag_core.fallback`). :func:`shown_text` is what to print
for it: ``(no answer released: null_token)``, never a blank line; and for an
answer whose text came from the model alone (``details["answer_source"] ==
"model"``: the public prediction, the zero-shot answer, the public fallback), the
text followed by ``(from the model alone, not the records)``.

>>> from dprag_core.answers import DPAnswer
>>> from dprag_core.budget import Budget
>>> released_nothing(DPAnswer("", Budget(1.0), "DPSparseVote", {"stop_reason": NULL_TOKEN}))
True
>>> sorted(STOP_REASONS)[:3]
['answer', 'budget', 'eos']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dprag_core.answers import DPAnswer

__all__ = [
    "ANSWER",
    "BUDGET",
    "EOS",
    "KEYWORDS",
    "MAX_TOKENS",
    "MODEL_ALONE_NOTE",
    "NULL_TOKEN",
    "PTR_FAILED",
    "STOP_REASONS",
    "TEXT_MODEL",
    "released_nothing",
    "shown_text",
]

EOS = "eos"
MAX_TOKENS = "max_tokens"
BUDGET = "budget"
NULL_TOKEN = "null_token"
KEYWORDS = "keywords"
PTR_FAILED = "ptr_failed"
TEXT_MODEL = "text_model"
ANSWER = "answer"

STOP_REASONS = frozenset(
    {EOS, MAX_TOKENS, BUDGET, NULL_TOKEN, KEYWORDS, PTR_FAILED, TEXT_MODEL, ANSWER}
)
"""Every value ``details["stop_reason"]`` can take."""


def released_nothing(answer: DPAnswer) -> bool:
    """True when ``answer`` carries no text worth showing (empty or blank).

    A post-processing of the DP output alone, so acting on it (a public
    fallback) costs no privacy.

    >>> from dprag_core.answers import DPAnswer
    >>> released_nothing(DPAnswer(" ", None, "X")), released_nothing(DPAnswer("a", None, "X"))
    (True, False)
    """
    return not answer.text.strip()


MODEL_ALONE_NOTE = "(from the model alone, not the records)"
"""What :func:`shown_text` appends to an answer whose text came from the model alone."""


def shown_text(text: str, details: Mapping[str, Any]) -> str:
    """What to print for an answer: its text (saying so when it came from the model alone),
    or why nothing was released.

    An empty DP answer is not an error: no word had a clear enough majority of
    the voters within the answer's epsilon (too few supporting records for
    that epsilon), and printing it as a blank line hides that. An answer that
    released no private decision (``details["answer_source"] == "model"``) is the
    model's own answer to the question, however fluent: it is marked with
    :data:`MODEL_ALONE_NOTE`. ``details`` is the answer's (``DPAnswer.details``,
    the chain's ``details``, the engine's ``metadata["details"]``).

    >>> shown_text("", {"stop_reason": "null_token"})
    '(no answer released: null_token)'
    >>> shown_text(" Damorin", {"stop_reason": "budget", "answer_source": "documents"})
    ' Damorin'
    >>> shown_text("Dench was born in England.", {"answer_source": "model"})
    'Dench was born in England. (from the model alone, not the records)'
    """
    if not text.strip():
        return f"(no answer released: {details.get('stop_reason', 'unknown')})"
    if details.get("answer_source") == "model":
        return f"{text.rstrip()} {MODEL_ALONE_NOTE}"
    return text
