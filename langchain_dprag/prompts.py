"""Carry the app's own LangChain prompt over to a dprag mechanism.

A LangChain RAG app has a prompt with a context and a question variable
(``ChatPromptTemplate.from_template("Answer from {context}: {question}")``).
dprag mechanisms take ``str.format`` templates with ``{context}`` and
``{question}`` fields (:mod:`dprag_core.prompts`) and fill them themselves:
each voter's prompt gets *that voter's* documents as its context (one document
each for DP-KSA's responses), and the public prompt (the non-RAG token of
DPSparseVote, the zero-shot answer of DP-KSA, the public fallback) gets no
context at all. :func:`templates_from_prompt` turns the app's prompt into both:

- ``rag``: the prompt with ``{context}`` and ``{question}`` left as fields;
- ``public``: the same prompt with an empty context, ``{question}`` only.

A chat prompt's messages are joined, in order, into one text (blank line
between them): dprag's models take one user message per prompt. Partial
variables are filled in; any other required variable is an error that names
the variables the prompt must take. Literal braces in the prompt are escaped.

>>> from langchain_core.prompts import ChatPromptTemplate
>>> prompt = ChatPromptTemplate.from_messages(
...     [("system", "Answer from the records only."), ("human", "{context}\\n\\nQ: {question}")]
... )
>>> t = templates_from_prompt(prompt)
>>> print(t.rag)
Answer from the records only.
<BLANKLINE>
{context}
<BLANKLINE>
Q: {question}
>>> t.kwargs(DPSparseVote)  # doctest: +SKIP
{'template': '...', 'public_template': '...'}
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from langchain_core.prompts import BasePromptTemplate
from langchain_core.prompts.chat import BaseChatPromptTemplate
from langchain_core.prompts.string import StringPromptTemplate

from langchain_dprag._compat import message_text

__all__ = ["DPTemplates", "templates_from_prompt"]

_CONTEXT = "\x00dprag-context\x00"
_QUESTION = "\x00dprag-question\x00"


@dataclass(frozen=True)
class DPTemplates:
    """A prompt as dprag templates: ``rag`` (``{context}``, ``{question}``), ``public``."""

    rag: str
    public: str

    def kwargs(self, mechanism: type) -> dict[str, str]:
        """The constructor keywords of ``mechanism`` (a class) that take these templates.

        Voting mechanisms and DP-ICL: ``template`` and ``public_template``;
        DP-KSA / KSA: ``response_template`` and ``zero_shot_template``; RAG:
        ``template``; NonRAG: ``template`` (the public one). For MuRAG, build its
        inner mechanism with them.

        >>> from dprag_core.algorithms.ksa import DPKSA
        >>> sorted(DPTemplates("{context} {question}", "{question}").kwargs(DPKSA))
        ['response_template', 'zero_shot_template']
        """
        from dprag_core.algorithms.baselines import NonRAG

        if not isinstance(mechanism, type):
            raise TypeError(f"mechanism must be a mechanism class, got {type(mechanism).__name__}")
        params = inspect.signature(mechanism).parameters
        if "public_template" in params:
            return {"template": self.rag, "public_template": self.public}
        if "response_template" in params:
            return {"response_template": self.rag, "zero_shot_template": self.public}
        if "template" in params:
            return {"template": self.public if issubclass(mechanism, NonRAG) else self.rag}
        raise TypeError(f"{mechanism.__name__} takes no prompt template")


def _render(prompt: BasePromptTemplate[Any], values: dict[str, str]) -> str:
    if isinstance(prompt, BaseChatPromptTemplate):
        return "\n\n".join(message_text(m) for m in prompt.format_messages(**values))
    return str(prompt.format(**values))


def _template(prompt: BasePromptTemplate[Any], values: dict[str, str]) -> str:
    text = _render(prompt, values).replace("{", "{{").replace("}", "}}")
    return text.replace(_CONTEXT, "{context}").replace(_QUESTION, "{question}")


def templates_from_prompt(
    prompt: BasePromptTemplate[Any], *, context: str = "context", question: str = "question"
) -> DPTemplates:
    """The dprag templates of a LangChain ``PromptTemplate`` / ``ChatPromptTemplate``.

    ``context`` and ``question`` name the prompt's variables for the documents
    and the question (``question="input"`` for ``create_retrieval_chain``'s
    prompts). The prompt must take exactly these two (partials aside), and show
    each once it is formatted.

    >>> from langchain_core.prompts import PromptTemplate
    >>> templates_from_prompt(PromptTemplate.from_template("{docs} {question}"))
    Traceback (most recent call last):
    ...
    ValueError: prompt must take the variables 'context' and 'question' (it takes ['docs', \
'question']): name them with templates_from_prompt(prompt, context=..., question=...) or fill \
the others with prompt.partial(...)
    """
    if not isinstance(prompt, (StringPromptTemplate, BaseChatPromptTemplate)):
        raise TypeError(
            "prompt must be a LangChain PromptTemplate or ChatPromptTemplate, "
            f"got {type(prompt).__name__}"
        )
    needed = {context, question}
    found = sorted(prompt.input_variables)
    if context == question or set(found) != needed:
        raise ValueError(
            f"prompt must take the variables {context!r} and {question!r} (it takes {found}): "
            "name them with templates_from_prompt(prompt, context=..., question=...) or fill "
            "the others with prompt.partial(...)"
        )
    rag = _template(prompt, {context: _CONTEXT, question: _QUESTION})
    public = _template(prompt, {context: "", question: _QUESTION})
    for name, field in ((context, "{context}"), (question, "{question}")):
        if field not in rag:
            raise ValueError(f"prompt must show the variable {name!r} once it is formatted")
    return DPTemplates(rag=rag, public=public)
