"""An opt-in public fallback: when a DP mechanism releases nothing, the model answers alone.

A DP answer can be empty: ⊥ or EOS on the first token (the voters did not
agree clearly enough), every token spent. A chat UI then shows nothing. With
``public_fallback=True`` the app answers such a query with the mechanism's own
model given **the question alone** (:class:`~dprag_core.algorithms.baselines.NonRAG`
with the mechanism's no-context prompt and answer length, as its
:meth:`~dprag_core.algorithms.base.Mechanism.public_model` states), and marks the answer
``details["public_fallback"] = True`` and ``details["answer_source"] = "model"``
(the text came from the model alone); ``details["stop_reason"]`` still says
why the DP mechanism stopped.

Why it costs no privacy: the decision is a function of the DP answer's text
alone (:func:`~dprag_core.stop_reasons.released_nothing`), a post-processing
of a DP output, and the fallback never sees a document (it is called with an
empty candidate list and builds its prompt from the question only). The
answer's guarantee is the DP query's, already charged.

DP-KSA needs no fallback for a failed PTR test: it already answers zero-shot
(the question alone) and says so with ``stop_reason == "ptr_failed"``.

>>> from dprag_core.answers import DPAnswer
>>> from dprag_core.budget import Budget
>>> class Api:  # a text model
...     def generate(self, prompts, *, max_new_tokens=64): return ["Paris"] * len(prompts)
>>> from dprag_core.algorithms.baselines import NonRAG
>>> empty = DPAnswer("", Budget(1.0), "DPSparseVote", {"stop_reason": "null_token"})
>>> answer = fallback_answer(empty, NonRAG(Api()), "Capital of France?")
>>> answer.text, answer.details["public_fallback"], answer.details["stop_reason"]
('Paris', True, 'null_token')
>>> answer.details["answer_source"]
'model'
"""

from __future__ import annotations

from collections.abc import Iterator

from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import NonRAG
from dprag_core.answers import DPAnswer, answer_source
from dprag_core.stop_reasons import released_nothing

__all__ = ["check_public_fallback", "fallback_answer", "fallback_stream", "public_answerer"]


def public_answerer(mechanism: Mechanism) -> NonRAG:
    """A :class:`NonRAG` made from ``mechanism.public_model()``: model, prompt and length.

    Each mechanism states these itself (voting and DP-ICL: ``public_template``
    and ``max_new_tokens``; DP-KSA: ``zero_shot_template`` and ``answer_tokens``;
    MuRAG, MuRAG-Ada and NaiveMulti: their ``inner``'s). One without a model is
    refused.

    >>> from dprag_core.algorithms.baselines import NonRAG
    >>> class Api:  # a text model
    ...     def generate(self, prompts, *, max_new_tokens=64): return [""] * len(prompts)
    >>> public_answerer(NonRAG(Api(), max_new_tokens=9)).max_new_tokens
    9
    """
    public = mechanism.public_model()
    if public is None:
        raise ValueError(
            f"public_fallback=True needs a mechanism with a model ({mechanism.name}."
            "public_model() is None); pass public_fallback=NonRAG(model) instead"
        )
    return NonRAG(public.model, max_new_tokens=public.max_new_tokens, template=public.template)


def check_public_fallback(option: object, mechanism: Mechanism) -> NonRAG | None:
    """The fallback answerer for a ``public_fallback=`` option (checked when an app is built).

    ``False``/``None``: none (the default). ``True``: :func:`public_answerer`.
    A :class:`NonRAG`: that one (another model, prompt or length). Anything
    else is a TypeError: a mechanism that reads documents cannot be a fallback.

    >>> check_public_fallback(False, None) is None
    True
    >>> check_public_fallback("yes", None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: public_fallback must be True, False or a NonRAG (the model without ...), got str
    """
    if option is None or option is False:
        return None
    if option is True:
        return public_answerer(mechanism)
    if isinstance(option, NonRAG):
        return option
    raise TypeError(
        "public_fallback must be True, False or a NonRAG (the model without the corpus), "
        f"got {type(option).__name__}"
    )


def _marked(public: DPAnswer, private: DPAnswer) -> DPAnswer:
    source = answer_source(public.text, from_documents=False)
    details = {**private.details, "public_fallback": True, "answer_source": source}
    return DPAnswer(public.text, private.guarantee, private.mechanism, details, private.uses_corpus)


def fallback_stream(
    items: Iterator[str | DPAnswer], fallback: NonRAG | None, question: str
) -> Iterator[str | DPAnswer]:
    """Pass a mechanism's stream through; if its answer released nothing, stream the public one.

    The DP stream's chunks come first (only blank ones, when the fallback is
    taken), then the public answer's chunks and the marked :class:`DPAnswer`.
    """
    for item in items:
        if not isinstance(item, DPAnswer) or fallback is None or not released_nothing(item):
            yield item
            continue
        for public in fallback.stream(question, []):
            yield _marked(public, item) if isinstance(public, DPAnswer) else public


def fallback_answer(answer: DPAnswer, fallback: NonRAG | None, question: str) -> DPAnswer:
    """``answer``, or the marked public answer when it released nothing (see the module)."""
    if fallback is None or not released_nothing(answer):
        return answer
    return _marked(fallback.answer(question, []), answer)
