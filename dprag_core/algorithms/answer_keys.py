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
2. **Cut word**: a completion its generator stopped at the token limit
   (a :class:`~dprag_core.models.cut.CutText`: the provider's
   ``finish_reason="length"``) loses its last word when the text ends on a
   letter or digit, since the limit may have cut it there ("Combination Qu" ->
   "Combination"; a word the limit happened to end exactly goes too, the price
   of never keeping a fragment); a cut text ending on a space or punctuation
   keeps every word.
3. **First sentence** of the first non-blank line (a sentence ends at ``.``,
   ``!`` or ``?`` after two lower-case letters or digits, so "Dr. Smith" and
   "U.S." stay whole).
4. **Words**: Unicode NFKC, case-folded; runs of letters and digits, with inner
   hyphens and apostrophes kept ("co-amoxiclav", "o'neil", "555-0101"); a
   possessive "'s" dropped.
5. **Frame**: if the sentence has a copula ("is", "are", "was", "were", or a
   colon), it splits into the words before the first one and the words after it
   (up to the next clause break: a comma, semicolon, parenthesis, "which",
   "who", "that"). The side holding fewer of the question's words is the answer
   (the other one restates the question; a tie goes to the side after): it is
   tried first, then the other side, then the whole sentence. "The recommended
   treatment for X is metformin" and "Metformin is the treatment used for X"
   both give ``metformin``.
6. **Content**: articles, stop words and QA filler
   (:data:`~dprag_core.algorithms.ksa.STOP_WORDS`) and the question's own words
   are removed; a question word matches in any of its simple forms ("treated",
   "treatment" and "treating" are one, :func:`stem`). The first of step 5's
   parts that keeps a word gives the key.
7. **Echo**: an answer with no word beyond the question's own ("Angola." for
   "Which country colonised Angola?") echoes the question's subject: it
   abstains. Only a question that offers a choice ("X or Y": "Is Mars or
   Venus larger?") takes such an answer as its vote: the first of the
   alternatives it names ("Venus.", "Mars is larger." give ``venus``, ``mars``).
8. **Inflections**: each word becomes its :func:`base_form` ("achieved",
   "achieves", "achieving" and "achieve" all give ``achieve``).
9. **Generic**: a key whose every word is on the fixed public list
   :data:`GENERIC_WORDS` ("combination", "information", "answer", "patient",
   ...) says nothing about the question: it abstains.
10. **Key**: the first ``max_words`` (6) words, joined by single spaces.

Why the claim of the mechanisms still holds: every step reads the voter's
answer (and whether *that* completion was cut, which its generator decided from
that voter's prompt alone) and the public question, so one voter's key stays a
function of that voter's records; one added or removed privacy unit changes at
most one voter's key, so the histogram of keys moves by at most one vote for one
key and one against another — the sensitivity the selection's claim is stated
for (:class:`~dprag_core.algorithms.answer_vote.DPAnswerVote`). Abstaining more
often only removes votes.

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
>>> answer_key("Angola.", "Which country colonised Angola?") is ABSTAIN
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
from dprag_core.models.cut import was_cut
from dprag_core.validation import positive_int

__all__ = [
    "ABSTAIN",
    "ABSTAIN_PATTERN",
    "GENERIC_WORDS",
    "AnswerKey",
    "answer_key",
    "base_form",
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

GENERIC_WORDS: Final = frozenset(
    {
        "answer", "question", "context", "information", "info", "record", "document",
        "text", "passage", "note", "data", "detail", "patient", "person", "people",
        "combination", "option", "choice", "type", "kind", "sort", "example", "case",
        "thing", "something", "someone", "somebody", "anything", "everything", "nothing",
        "none", "other", "various", "several", "many", "some", "general", "specific",
        "following", "above", "below", "mentioned", "given", "provide", "based", "according",
    }
)  # fmt: skip
"""Words that answer no question on their own: a key made only of these abstains
(compared by :func:`base_form`, so "records" and "combinations" are on it too)."""

_LINE_BREAK = re.compile(r"\n\s*")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9]{2}[.!?])\s")
_COPULA = re.compile(r"\s(?:is|are|was|were)\s|:", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;()]|\s(?:which|who|that)\s", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['\-][^\W_]+)*")
_ARTICLES = frozenset({"a", "an", "the"})
_CUT_WORD = re.compile(r"[^\W_]+(?:['\-][^\W_]+)*['\-]?$")
_CHOICE = re.compile(r"([^\W_]+(?:['\-][^\W_]+)*)\s+or\s+([^\W_]+(?:['\-][^\W_]+)*)")
_E_ENDINGS = ("v", "iz", "bl", "dl", "tl", "ag", "rc", "nc", "u")
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


def base_form(word: str) -> str:
    """The form a key keeps of ``word``: its English inflection undone, by rule.

    A small deterministic rule set (no dictionary), on case-folded words of
    letters only, four letters or more (digits, hyphens and short words stay):

    - ``-ies`` / ``-ied`` -> ``-y`` ("studies", "studied" -> "study");
    - ``-sses`` -> ``-ss``; ``-ches`` / ``-shes`` / ``-xes`` / ``-zes`` lose ``-es``;
    - ``-eed`` -> ``-ee`` (six letters or more: "agreed" -> "agree");
    - ``-ing`` / ``-ed`` (a vowel left in a stem of three letters or more, not
      ending in "th": "something" stays) are removed; then a doubled final
      consonant other than l, s, z is undoubled
      ("stopped" -> "stop"), and a stem ending in v, iz, bl, dl, tl, ag, rc,
      nc or u gets its ``e`` back ("achieved" -> "achieve", "managed" ->
      "manage");
    - ``-s`` is removed from words of five letters or more not ending in
      ``ss``, ``us`` or ``is`` ("treats" -> "treat"; "Paris", "virus", "Mars" stay).

    A rule, not a dictionary: a word that only looks inflected loses its ending
    too ("diabetes" -> "diabete"); both forms of it then share that key, which is
    what voting needs.

    >>> [base_form(w) for w in ("achieved", "achieves", "achieving", "achieve")]
    ['achieve', 'achieve', 'achieve', 'achieve']
    >>> [base_form(w) for w in ("studies", "stopped", "treats", "paris", "555-0101")]
    ['study', 'stop', 'treat', 'paris', '555-0101']
    """
    if len(word) < 4 or not word.isalpha():
        return word
    if word.endswith(("ies", "ied")) and len(word) >= 5:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith(("ches", "shes", "xes", "zes")):
        return word[:-2]
    if word.endswith("eed"):
        return word[:-1] if len(word) >= 6 else word
    for suffix in ("ing", "ed"):
        root = word[: -len(suffix)]
        if word.endswith(suffix) and len(root) >= 3 and re.search("[aeiouy]", root):
            if root.endswith("th"):  # "something", "nothing": nouns, not inflections
                return word
            if root[-1] == root[-2] and root[-1] not in "aeiouylsz":
                return root[:-1]
            return root + "e" if root.endswith(_E_ENDINGS) else root
    if word.endswith("s") and len(word) >= 5 and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


_GENERIC_BASES: Final = frozenset(base_form(w) for w in GENERIC_WORDS)


def _choice(sentence: str, question: str) -> list[str]:
    """Step 7: the first of the question's alternatives ("X or Y") the answer names."""
    folded = unicodedata.normalize("NFKC", question).casefold()
    options = {stem(w) for pair in _CHOICE.findall(folded) for w in pair}
    return [w for w in _words(sentence) if stem(w) in options][:1]


def _drop_cut_word(answer: str) -> str:
    """Step 2: a cut completion without the word the limit cut (if it ends inside one)."""
    return _CUT_WORD.sub("", answer) if was_cut(answer) else answer


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
    only echoes the question, says nothing but generic words, or has no word left.
    A :class:`~dprag_core.models.cut.CutText` (a completion stopped at the token
    limit) loses the word the limit cut.

    >>> answer_key("The disease is Brainpynopathy, which is rare.", "What is my disease?")
    'brainpynopathy'
    >>> answer_key("Venus.", "Is Mars or Venus larger?")
    'venus'
    >>> answer_key("  ", "Who?") is ABSTAIN
    True
    >>> from dprag_core.models.cut import CutText
    >>> answer_key(CutText("Combination Combination Qu"), "Which drug?") is ABSTAIN
    True
    """
    limit = positive_int("max_words", max_words)
    if not isinstance(answer, str) or ABSTAIN_PATTERN.search(answer.casefold().replace("’", "'")):
        return ABSTAIN
    sentence = _first_sentence(_drop_cut_word(answer))
    question_stems = frozenset(stem(w) for w in _words(question))
    parts = (_content(_words(part), question_stems) for part in _parts(sentence, question_stems))
    kept = next((part for part in parts if part), None)
    if kept is None:  # step 7: the answer only repeats the question
        kept = _choice(sentence, question)
    if not kept:
        return ABSTAIN
    words = [base_form(w) for w in kept]
    if all(w in _GENERIC_BASES for w in words):
        return ABSTAIN
    return " ".join(words[:limit])


def render_key(key: str) -> str:
    """The released text of a key: each word capitalised (a public function of the key).

    >>> render_key("co-amoxiclav 500 mg")
    'Co-amoxiclav 500 Mg'
    """
    return " ".join(word[:1].upper() + word[1:] for word in key.split(" "))
