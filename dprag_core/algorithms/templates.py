"""An app's own prompt, carried over to a mechanism (the adapters' ``text_qa_template``).

Every mechanism that reads documents builds its per-document prompts from one
``str.format`` template with ``{context}`` and ``{question}``
(:mod:`dprag_core.prompts`): the voters' prompts (DPVote, DPSparseVote,
VoteRAG), DP-KSA's responses, DP-ICL's per-unit prompts, RAG's one prompt. Its
name is the mechanism's :attr:`~dprag_core.algorithms.base.Mechanism.context_template_field`.
:func:`with_context_template` replaces that template in a copy of the
mechanism (a :class:`~dprag_core.algorithms.base.MechanismWrapper` such as
MuRAG and NaiveMulti: in a copy of its inner mechanism), leaving the public
(no-context) prompts alone.

``{context}`` is what *one* prompt holds: one voter's k documents, one privacy
unit's chunks for DP-KSA and DP-ICL, never the whole retrieved set.

>>> from dprag_core.algorithms.baselines import RAG
>>> class Api:
...     def generate(self, prompts, *, max_new_tokens=64): return list(prompts)
>>> rag = with_context_template(RAG(Api(), k=1), "Notes: {context}\\nAsk: {question}")
>>> rag.template
'Notes: {context}\\nAsk: {question}'
"""

from __future__ import annotations

import copy

from dprag_core.algorithms.base import CONTEXT_FIELDS, Mechanism, MechanismWrapper, check_template

__all__ = ["with_context_template"]


def with_context_template(mechanism: Mechanism, template: str) -> Mechanism:
    """A copy of ``mechanism`` whose per-document prompt is ``template``.

    ``template`` is a ``str.format`` string using exactly ``{context}`` and
    ``{question}`` (both required). The copy shares the model, ledger and
    accountant of the original. A mechanism that builds no prompt from
    documents (NonRAG) is a ValueError.

    >>> from dprag_core.algorithms.baselines import RAG
    >>> class Api:
    ...     def generate(self, prompts, *, max_new_tokens=64): return list(prompts)
    >>> with_context_template(RAG(Api(), k=1), "{question}")
    Traceback (most recent call last):
    ...
    ValueError: template must contain {context}
    """
    checked = check_template("template", template, CONTEXT_FIELDS)
    if isinstance(mechanism, MechanismWrapper):
        wrapper = copy.copy(mechanism)
        wrapper.inner = with_context_template(mechanism.inner, checked)
        return wrapper
    field = mechanism.context_template_field
    if field is None:
        raise ValueError(
            f"{mechanism.name} builds no prompt from documents: a context template does not apply"
        )
    changed = copy.copy(mechanism)
    setattr(changed, field, checked)
    return changed
