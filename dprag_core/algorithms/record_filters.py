"""Public per-record filters for answer-level voting: which of a voter's records it reads.

A :class:`~dprag_core.algorithms.answer_vote.DPAnswerVote` voter holding a
record about something else answers anyway: a small reader asked for the
treatment of one disease and handed a record of another copies that record's
drug, and when many voters hold records of one frequent other disease, their
common wrong key outvotes the fact. ``record_filter=`` lets each voter read
only its records that pass a public predicate ``keep(question, record_text)``
and abstain when none does. The predicate reads the public question and one
record, so a voter's key stays a function of its own records (the mechanism's
claim is unchanged; abstaining only removes votes).

:func:`mentions_subject` is such a predicate: a record is kept when it names
every one of the question's *subject words* (:func:`subject_words`: the
question's capitalised words that do not open a sentence, as "Reegraitis" in
"What treatment is recommended for Reegraitis?"). A question without such a
word ("I have chills and a fever. What is my disease?") keeps every record.

>>> q = "What treatment is recommended for Reegraitis?"
>>> subject_words(q)
('reegraitis',)
>>> mentions_subject(q, "Ana Zorb has Reegraitis; her treatment is Kirzyafil.")
True
>>> mentions_subject(q, "Cleo Marsh has Troozemia; she is treated with Pleozone.")
False
>>> mentions_subject("I have chills. What is my disease?", "Any record at all.")
True
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

__all__ = ["RecordFilter", "mentions_subject", "subject_words"]

RecordFilter = Callable[[str, str], bool]
"""``keep(question, record_text) -> bool``: a public predicate on the question and one
record; it must read nothing but its two arguments."""

_WORD = re.compile(r"[^\W_]+(?:['\-][^\W_]+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)[\"'(\[]*([^\W_]+(?:['\-][^\W_]+)*)")
_POSSESSIVE = re.compile(r"['\u2019]s$")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def subject_words(question: str) -> tuple[str, ...]:
    """The question's capitalised words that open no sentence, case-folded, in order.

    A possessive "'s" is dropped ("Ana Zorb's" gives ``ana``, ``zorb``); the
    pronoun "I" is not a subject word.

    >>> subject_words("What is Ana Zorb's phone number?")
    ('ana', 'zorb')
    >>> subject_words("I have a rash. What is my disease?")
    ()
    """
    text = unicodedata.normalize("NFKC", question)
    openers = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    words: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group()
        if match.start() in openers or word == "I" or not word[0].isupper():
            continue
        folded = _POSSESSIVE.sub("", _fold(word))
        if folded and folded not in words:
            words.append(folded)
    return tuple(words)


def mentions_subject(question: str, record: str) -> bool:
    """Whether ``record`` names every subject word of ``question`` (as a whole word,
    any case); True when the question has none (:func:`subject_words`).

    >>> mentions_subject("Who treats Snurfosis?", "SNURFOSIS is treated with Zorbex.")
    True
    >>> mentions_subject("Who treats Snurfosis?", "Snurfosisa is treated with Zorbex.")
    False
    """
    subjects = subject_words(question)
    if not subjects:
        return True
    present = {_POSSESSIVE.sub("", w) for w in _WORD.findall(_fold(record))}
    return all(word in present for word in subjects)
