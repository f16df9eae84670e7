"""The public map from a voter's whole answer to its canonical key (answer-level voting).

:class:`~dprag_core.algorithms.answer_vote.DPAnswerVote` and its non-private
counterpart :class:`~dprag_core.algorithms.answer_vote.AnswerVote` count one vote
per voter for the *key* of its answer, not for its wording: "The recommended
treatment for Snurfosis is metformin." and "Metformin." both vote for
``metformin``. :func:`answer_key` is that map. It reads only the answer and the
question (both public inputs of the map: the question is the user's, the answer
is one voter's), so one voter's key depends on that voter's records alone — what
the privacy claim of the mechanisms needs. A voter that says it does not know,
or writes nothing usable, gets :data:`ABSTAIN` and votes for nothing.

The steps, in order (all public):

1. **Abstain** on an answer that says it cannot answer ("I don't know", "the
   record does not mention ...", "no information", "unknown", "sorry", ...:
   :data:`ABSTAIN_PATTERN`) or is blank.
2. **First sentence** of the first non-blank line (a sentence ends at ``.``,
   ``!`` or ``?`` after two lower-case letters or digits, so "Dr. Smith" and
   "U.S." stay whole).
3. **Words**: Unicode NFKC, case-folded; runs of letters and digits, with inner
   hyphens and apostrophes kept ("co-amoxiclav", "o'neil", "555-0101"); a
   possessive "'s" dropped.
4. **Frame**: if the sentence has a copula ("is", "are", "was", "were", or a
   colon), it splits into the words before the first one and the words after it
   (up to the next clause break: a comma, semicolon, parenthesis, "which",
   "who", "that"). The side holding fewer of the question's words is the answer
   (the other one restates the question; a tie goes to the side after): it is
   tried first, then the other side, then the whole sentence. "The recommended
   treatment for X is metformin" and "Metformin is the treatment used for X"
   both give ``metformin``.
5. **Content**: articles, stop words and QA filler
   (:data:`~dprag_core.algorithms.ksa.STOP_WORDS`) and the question's own words
   are removed; a question word matches in any of its simple forms ("treated",
   "treatment" and "treating" are one, :func:`stem`). The first of step 4's
   parts that keeps a word gives the key; if none does (the answer only repeats
   the question: "Venus" for "Is Mars or Venus larger?"), the sentence's
   content words with the question's words kept; if still none, :data:`ABSTAIN`.
6. **Key**: the first ``max_words`` (6) words, joined by single spaces.

:func:`render_key` is the text a released key is shown as: each word
capitalised ("judi dench" -> "Judi Dench"), a public function of the key alone.

>>> answer_key("The recommended treatment for Snurfosis is metformin.",
...            "What treatment is recommended for Snurfosis?")
'metformin'
>>> answer_key("Metformin is the treatment used for Snurfosis.",
...            "What treatment is recommended for Snurfosis?")
'metformin'
>>> answer_key("The record does not mention a treatment.", "What treatment?") is ABSTAIN
True
>>> render_key("judi dench")
'Judi Dench'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Final

from dprag_core.algorithms.ksa import STOP_WORDS
from dprag_core.validation import positive_int

__all__ = [
    "ABSTAIN",
    "ABSTAIN_PATTERN",
    "AnswerKey",
    "answer_key",
    "render_key",
    "stem",
]

ABSTAIN: Final = None
"""The key of a voter that does not answer: it votes for nothing (never released)."""

AnswerKey = Callable[[str, str], "str | None"]
"""``key(answer, question) -> str | None``: a public map from one voter's answer to its key
(:data:`ABSTAIN` = None: no vote). It must read nothing but its two arguments."""

ABSTAIN_PATTERN: Final = re.compile(
    r"\b(?:"
    r"i\s+(?:do\s+not|don't|cannot|can't)\s+(?:know|say|tell|answer|determine)"
    r"|(?:does|do|did)\s*(?:not|n't)\s+(?:mention|say|specify|state|provide|contain|include"
    r"|tell|indicate|give|list)"
    r"|not\s+(?:mentioned|provided|specified|stated|given|available|known|listed|included"
    r"|indicated|sure|clear|enough|possible)"
    r"|no\s+(?:information|mention|answer|data|details|record|indication)"
    r"|unknown|unclear|cannot|can't|unable|insufficient|sorry|n/a"
    r")\b"
)
"""What an abstaining answer says (searched in the case-folded answer)."""

_LINE_BREAK = re.compile(r"\n\s*")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9]{2}[.!?])\s")
_COPULA = re.compile(r"\s(?:is|are|was|were)\s|:", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;()]|\s(?:which|who|that)\s", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['\-][^\W_]+)*")
_ARTICLES = frozenset({"a", "an", "the"})
_SUFFIXES = ("ations", "ation", "ments", "ment", "ings", "ing", "ions", "ion", "ed", "es", "s")


def stem(word: str) -> str:
    """A word's simple stem, to match the question's words in any form.

    The longest of a few English suffixes is removed when at least four letters
    remain: "treatment", "treated" and "treating" are all "treat".

    >>> [stem(w) for w in ("treatment", "treated", "causes", "metformin")]
    ['treat', 'treat', 'caus', 'metformin']
    """
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _first_sentence(text: str) -> str:
    lines = [line for line in _LINE_BREAK.split(text.strip()) if line.strip()]
    return _SENTENCE_END.split(lines[0], maxsplit=1)[0] if lines else ""


def _words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    return [re.sub(r"'s$", "", w) for w in _WORD.findall(folded)]


def _content(words: Iterable[str], question_stems: frozenset[str]) -> list[str]:
    return [
        w
        for w in words
        if w not in _ARTICLES and w not in STOP_WORDS and stem(w) not in question_stems
    ]


def _parts(sentence: str, question_stems: frozenset[str]) -> list[str]:
    """Step 4: the answer side of the first copula, the other side, the whole sentence."""
    copula = _COPULA.search(sentence)
    if copula is None:
        return [sentence]
    after = _CLAUSE_BREAK.split(sentence[copula.end() :], maxsplit=1)[0]
    before = sentence[: copula.start()]
    sides = sorted(
        (after, before), key=lambda side: sum(stem(w) in question_stems for w in _words(side))
    )
    return [*sides, sentence]


def answer_key(answer: str, question: str, *, max_words: int = 6) -> str | None:
    """The canonical key of one voter's ``answer`` to ``question`` (module docstring).

    Returns :data:`ABSTAIN` (None) for an answer that says it does not know,
    or that has no word left.

    >>> answer_key("The disease is Brainpynopathy, which is rare.", "What is my disease?")
    'brainpynopathy'
    >>> answer_key("Venus.", "Is Mars or Venus larger?")
    'venus'
    >>> answer_key("  ", "Who?") is ABSTAIN
    True
    """
    limit = positive_int("max_words", max_words)
    if not isinstance(answer, str) or ABSTAIN_PATTERN.search(answer.casefold().replace("’", "'")):
        return ABSTAIN
    sentence = _first_sentence(answer)
    question_stems = frozenset(stem(w) for w in _words(question))
    for part in _parts(sentence, question_stems):
        kept = _content(_words(part), question_stems)
        if kept:
            return " ".join(kept[:limit])
    kept = _content(_words(sentence), frozenset())
    return " ".join(kept[:limit]) if kept else ABSTAIN


def render_key(key: str) -> str:
    """The released text of a key: each word capitalised (a public function of the key).

    >>> render_key("co-amoxiclav 500 mg")
    'Co-amoxiclav 500 Mg'
    """
    return " ".join(word[:1].upper() + word[1:] for word in key.split(" "))
