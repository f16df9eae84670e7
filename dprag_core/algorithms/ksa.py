"""DP-KSA and non-private KSA: answer from a few keywords aggregated over many responses
(Tang et al. 2026, Alg. 1).

1. Retrieve N documents (``candidates_needed() = n_docs``); one response per
   privacy unit (its chunks joined) through any :class:`TextModel`, always
   ``n_docs`` prompts on one fixed schedule
   (:func:`~dprag_core.models.outcomes.generate_each`: one call for dprag's
   wrappers and engines, one call per prompt for any other model). A prompt
   the model refuses (a content filter, a tokenizer rejecting a special token)
   is an empty response: it counts no keyword, and the query goes on.
2. Keyword histogram: each response's words (punctuation and stop words
   removed, optionally without the question's own words), each counted at most
   once per response. A word keeps the case the response wrote it in, and each
   written form is a keyword of its own (``Gleeblorazine`` is released as
   written, never lower-cased); stop words and the question's words are matched
   ignoring case, a public rule. The extractor is pluggable.
3. FindBestK (ε_k) picks k̂; TopKWithPTR (σ, δ₁) decides whether the exact top-k̂
   keyword *set* may be released (:mod:`dprag_core.mechanisms.ksa`). The
   parameters are calibrated from the user's (ε, δ) by
   :func:`dprag_core.accounting.ksa.calibrate_ksa`.
4. The final answer: the generator sees the question and the released keywords
   (alphabetical order: only the set is stable, not the count order), or the
   question alone (zero-shot) when PTR fails.

**Guarantee** (:class:`DPKSA`): ``query_cost()`` = the requested (ε, δ), w.r.t.
add/remove of one privacy unit, *provided the retriever's top-N is counted in units*
(one item per unit, or a unit's chunks all inside or all outside): then one unit changes
at most one response, hence every keyword's count by at most one
(L∞ sensitivity 1). A refused prompt does
not change this: its response (empty) is still a function of that unit's documents and
the public question alone, when the refusal is decided by the prompt (a content filter)
or independent of the prompts (a transient error), and nothing else about the query (how
many calls, how many prompts, whether it fails) depends on it. The noise is calibrated
so that the certified bound (``parameters.achieved``, e.g. ε = 7.999999996 for a
requested 8) is within the requested budget; the answer reports, and the budget is
charged, the requested (ε, δ) itself: a valid claim (it is at least the certified one),
and the one the user configured, so totals add up in round numbers (ten queries of ε = 8
fit exactly in 80). The released keywords are DP outputs, their case included (the case
of a form is part of the keyword the histogram counts, so it is released by the same
mechanism, never restored afterwards from a response), and may appear verbatim in the
answer: that is by design (they are words that at least k̂-gap-many responses agree on).
``details`` holds ``k_hat``, ``ptr_passed``, ``keywords_released`` (a count),
``epsilon_bound`` (the accounting bound that certified ε, ``"rdp"`` or ``"pld"``) and
``stop_reason`` (``"keywords"``, or ``"ptr_failed"`` for a zero-shot answer:
:mod:`dprag_core.stop_reasons`), nothing per document.

>>> class Echo:
...     def generate(self, prompts, *, max_new_tokens=64):
...         return [p.split("Context:\\n")[-1].split("\\n")[0] for p in prompts]
>>> docs = [ScoredDocument(id=str(i), text="Gleeblorazine cures it", score=0.9)
...         for i in range(40)]
>>> a = DPKSA(Echo(), epsilon=5.0, n_docs=40).answer("What cures Flumplenaxism?", docs, rng=0)
>>> a.details["ptr_passed"], a.details["keywords_released"]
(True, 1)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dprag_core.accounting.ksa import KSAParameters, calibrate_ksa
from dprag_core.algorithms.base import (
    CONTEXT_FIELDS,
    QUESTION_FIELDS,
    Mechanism,
    PublicModel,
    Templates,
)
from dprag_core.answers import DPAnswer, answer_source
from dprag_core.budget import Budget
from dprag_core.mechanisms.ksa import find_best_k, gaps, top_k_with_ptr
from dprag_core.mechanisms.rng import RngLike
from dprag_core.models.base import TextModel
from dprag_core.models.checks import check_text_model
from dprag_core.models.outcomes import generate_each
from dprag_core.prompts import KEYWORDS_TEMPLATE, NO_CONTEXT_TEMPLATE, RAG_TEMPLATE, join_context
from dprag_core.query_ids import Query, as_query
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import KEYWORDS, PTR_FAILED
from dprag_core.validation import positive_finite, positive_int

__all__ = [
    "DPKSA",
    "KSA",
    "STOP_WORDS",
    "KeywordExtractor",
    "KeywordHistogram",
    "extract_keywords",
    "keyword_histogram",
]

KeywordExtractor = Callable[[str], Iterable[str]]
"""Anything mapping a response to its keywords (duplicates are counted once)."""

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor
    not of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves
    then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's will with won't would wouldn't you you'd you'll
    you're you've your yours yourself yourselves
    s t d ll m re ve yes may might must shall us one also however therefore thus whether
    answer answers question questions context document documents text provided based according
    mentioned information given states stated called known
    """.split()  # noqa: SIM905 (a readable word list)
)
"""English stop words plus the filler words of QA responses ("based on the context ...")."""

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def extract_keywords(text: str, *, exclude: Iterable[str] = ()) -> list[str]:
    """The distinct keywords of ``text`` as written, in order of first appearance.

    Words (letters/digits, inner apostrophes kept) in the case ``text`` has them,
    without stop words, single letters, possessive "'s" or anything in
    ``exclude`` (stop words and ``exclude`` matched ignoring case).

    >>> extract_keywords("Based on the context, Herman's disease is Flumplenaxism (rare).")
    ['Herman', 'disease', 'Flumplenaxism', 'rare']
    """
    banned = {w.casefold() for w in exclude}
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text):
        word = re.sub(r"['’]s$", "", match.group(), flags=re.IGNORECASE)
        if len(word) < 2 and not word.isdigit():
            continue
        if word.casefold() in STOP_WORDS or word.casefold() in banned:
            continue
        seen.setdefault(word, None)
    return list(seen)


@dataclass(frozen=True)
class KeywordHistogram:
    """Keywords sorted by count (ties: alphabetical) and their counts (responses containing them).

    >>> keyword_histogram(["red apple", "red car"]).keywords
    ('red', 'apple', 'car')
    """

    keywords: tuple[str, ...]
    counts: tuple[int, ...]

    def top(self, k: int) -> list[str]:
        """The top-``k`` keywords with a positive count, alphabetically ignoring case (a
        public order).

        >>> keyword_histogram(["beta Alpha", "beta gamma"]).top(2)
        ['Alpha', 'beta']
        """
        chosen = [kw for kw, c in zip(self.keywords[:k], self.counts[:k], strict=True) if c > 0]
        return sorted(chosen, key=lambda kw: (kw.casefold(), kw))


def keyword_histogram(
    responses: Sequence[str],
    *,
    extractor: KeywordExtractor | None = None,
    exclude: Iterable[str] = (),
) -> KeywordHistogram:
    """Count, for each keyword, the responses that contain it (once per response).

    >>> keyword_histogram(["aspirin aspirin", "aspirin"], exclude=["x"]).counts
    (2,)
    """
    banned = {w.casefold() for w in exclude}
    counter: Counter[str] = Counter()
    for response in responses:
        words = extractor(response) if extractor is not None else extract_keywords(response)
        counter.update({w for w in words if w.casefold() not in banned})
    ordered = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return KeywordHistogram(tuple(k for k, _ in ordered), tuple(c for _, c in ordered))


def _unit_contexts(docs: Sequence[ScoredDocument], n_docs: int) -> list[str]:
    """One context per privacy unit among the first ``n_docs`` real documents (chunks joined)."""
    groups: dict[str, list[str]] = {}
    for doc in [d for d in docs if not d.is_padding][:n_docs]:
        groups.setdefault(doc.unit, []).append(doc.text)
    return [join_context(texts) for texts in groups.values()]


class _KeywordAnswerer(Mechanism):
    """Shared steps of KSA and DP-KSA: responses, histogram, final prompt (KSA's constructor)."""

    context_template_field = "response_template"
    templates: ClassVar[Templates] = {
        "response_template": CONTEXT_FIELDS,
        "answer_template": ("keywords", "question"),
        "zero_shot_template": QUESTION_FIELDS,
    }

    def __init__(
        self,
        model: TextModel,
        *,
        n_docs: int = 80,
        k_min: int = 1,
        k_max: int = 20,
        extractor: KeywordExtractor | None = None,
        drop_question_words: bool = True,
        response_template: str = RAG_TEMPLATE,
        answer_template: str = KEYWORDS_TEMPLATE,
        zero_shot_template: str = NO_CONTEXT_TEMPLATE,
        response_tokens: int = 64,
        answer_tokens: int = 64,
    ) -> None:
        if extractor is not None and not callable(extractor):
            raise TypeError("extractor must be callable as extractor(text) -> iterable of words")
        self.model = check_text_model(model)
        self.n_docs = positive_int("n_docs", n_docs)
        self.k_min = positive_int("k_min", k_min)
        self.k_max = positive_int("k_max", k_max)
        if self.k_max < self.k_min:
            raise ValueError(f"k_max must be an integer >= k_min={self.k_min}, got {k_max!r}")
        self.extractor = extractor
        self.drop_question_words = bool(drop_question_words)
        self.response_template = response_template
        self.answer_template = answer_template
        self.zero_shot_template = zero_shot_template
        self.response_tokens = positive_int("response_tokens", response_tokens)
        self.answer_tokens = positive_int("answer_tokens", answer_tokens)

    def candidates_needed(self) -> int:
        """N, the number of documents to retrieve (one response each)."""
        return self.n_docs

    def public_model(self) -> PublicModel:
        """The model with ``zero_shot_template``, ``answer_tokens`` long (its zero-shot answer)."""
        return PublicModel(self.model, self.zero_shot_template, self.answer_tokens)

    def _histogram(self, question: str, docs: Sequence[ScoredDocument]) -> KeywordHistogram:
        """The keyword histogram of one response per privacy unit.

        The model is asked for ``n_docs`` responses whatever the corpus holds:
        one per unit, and for the rest of the ``n_docs`` slots (fewer units
        than documents, or fewer documents than ``n_docs``) the prompt with an
        empty context, whose responses are not counted. What a server or a
        hosted API is asked (how many prompts, on which schedule) is then public, and
        a refused prompt is an empty response (module docstring).
        """
        contexts = _unit_contexts(docs, self.n_docs)
        empty = self.response_template.format(context="", question=question)
        prompts = [self.response_template.format(context=c, question=question) for c in contexts]
        prompts += [empty] * (self.n_docs - len(prompts))
        outcomes = generate_each(self.model, prompts, max_new_tokens=self.response_tokens)
        responses = [r or "" for r in outcomes[: len(contexts)]]  # refused: an empty response
        exclude: Iterable[str] = ()
        if self.drop_question_words:
            exclude = (
                self.extractor(question)
                if self.extractor is not None
                else extract_keywords(question)
            )
        return keyword_histogram(responses, extractor=self.extractor, exclude=exclude)

    def _final_prompt(self, question: str, keywords: Sequence[str]) -> str:
        if keywords:
            return self.answer_template.format(keywords=", ".join(keywords), question=question)
        return self.zero_shot_template.format(question=question)

    def _final(self, question: str, keywords: Sequence[str]) -> str:
        """The answer to the question and the released keywords (public: a failure is too)."""
        prompt = self._final_prompt(question, keywords)
        return self.model.generate([prompt], max_new_tokens=self.answer_tokens)[0]

    def _released(
        self,
        question: str,
        keywords: Sequence[str],
        details: dict[str, Any],
        guarantee: Budget | None,
    ) -> DPAnswer:
        """The final answer: from the released keywords (the documents), or zero-shot."""
        text = self._final(question, keywords) or ""
        source = answer_source(text, from_documents=bool(keywords))
        return DPAnswer(text, guarantee, self.name, {**details, "answer_source": source})


class DPKSA(_KeywordAnswerer):
    """DP-KSA (Tang et al. 2026, Alg. 1): (ε, δ)-DP answers from privately released keywords.

    ``epsilon``/``delta`` is the per-query guarantee (calibrated into FindBestK's
    ε_k and PTR's σ, δ₁; see :attr:`parameters`). ``k_min``..``k_max`` is the
    public range of k. ``extractor`` maps a response to keywords
    (:func:`extract_keywords` by default). Templates: ``response_template``
    (``{context}``, ``{question}``) for the N responses, ``answer_template``
    (``{keywords}``, ``{question}``) and ``zero_shot_template`` (``{question}``).

    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(generate=lambda prompts, max_new_tokens=64: ["ok"] * len(prompts))
    >>> DPKSA(model, epsilon=2.0).query_cost().delta
    0.0001
    """

    name = "DPKSA"

    def __init__(
        self,
        model: TextModel,
        *,
        epsilon: float,
        delta: float = 1e-4,
        n_docs: int = 80,
        k_min: int = 1,
        k_max: int = 20,
        extractor: KeywordExtractor | None = None,
        drop_question_words: bool = True,
        response_template: str = RAG_TEMPLATE,
        answer_template: str = KEYWORDS_TEMPLATE,
        zero_shot_template: str = NO_CONTEXT_TEMPLATE,
        response_tokens: int = 64,
        answer_tokens: int = 64,
        epsilon_share: float | None = None,
    ) -> None:
        super().__init__(
            model,
            n_docs=n_docs,
            k_min=k_min,
            k_max=k_max,
            extractor=extractor,
            drop_question_words=drop_question_words,
            response_template=response_template,
            answer_template=answer_template,
            zero_shot_template=zero_shot_template,
            response_tokens=response_tokens,
            answer_tokens=answer_tokens,
        )
        total = Budget(positive_finite("epsilon", epsilon), delta)
        self.parameters: KSAParameters = calibrate_ksa(
            total, epsilon_share=epsilon_share, k_candidates=self.k_max - self.k_min + 1
        )
        got = self.parameters.achieved  # <= total (the search never goes over); max: floats
        self.guarantee = Budget(max(total.epsilon, got.epsilon), max(total.delta, got.delta))

    def query_cost(self) -> Budget:
        """The requested (ε, δ) of one query, which the calibrated noise stays within
        (``parameters.achieved``, the certified bound, is within 1% below it)."""
        return self.guarantee

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Responses → histogram → FindBestK → PTR → keywords (or zero-shot) → answer."""
        query = as_query(query, rng=rng)
        question, gen = query.question, query.rng
        hist = self._histogram(question, docs)
        p = self.parameters
        k_hat = find_best_k(
            hist.counts, epsilon=p.epsilon_k, k_min=self.k_min, k_max=self.k_max, rng=gen
        )
        passed = top_k_with_ptr(hist.counts, k_hat, sigma=p.sigma, delta=p.delta_ptr, rng=gen)
        keywords = hist.top(k_hat) if passed else []
        details: dict[str, Any] = {
            "k_hat": k_hat,
            "ptr_passed": passed,
            "keywords_released": len(keywords),
            "epsilon_bound": p.bound,
            "stop_reason": KEYWORDS if passed else PTR_FAILED,
        }
        return self._released(question, keywords, details, self.guarantee)

    def __repr__(self) -> str:
        b = self.guarantee
        return f"DPKSA(epsilon={b.epsilon:g}, delta={b.delta:g}, n_docs={self.n_docs})"


class KSA(_KeywordAnswerer):
    """Non-private KSA baseline: the top-k keywords with the largest gap, no noise (ε = ∞).

    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(generate=lambda prompts, max_new_tokens=64: ["ok"] * len(prompts))
    >>> KSA(model).query_cost() is None
    True
    """

    name = "KSA"

    def _final(self, question: str, keywords: Sequence[str]) -> str:
        """The answer to the question and the keywords, which are the documents' (nothing
        is released before it): one call through ``generate_each``, a refused prompt an
        empty answer, so whether the query fails never depends on them."""
        prompt = self._final_prompt(question, keywords)
        (text,) = generate_each(self.model, [prompt], max_new_tokens=self.answer_tokens)
        return text or ""

    def answer(
        self, query: Query | str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        """Responses → histogram → the top-k at the largest gap → answer (not private)."""
        question = as_query(query, rng=rng).question
        hist = self._histogram(question, docs)
        d = gaps(hist.counts, k_min=self.k_min, k_max=self.k_max)
        k = int(np.argmax(d)) + self.k_min
        keywords = hist.top(k)
        details = {"k_hat": k, "keywords_released": len(keywords), "stop_reason": KEYWORDS}
        return self._released(question, keywords, details, None)

    def __repr__(self) -> str:
        return f"KSA(n_docs={self.n_docs})"
