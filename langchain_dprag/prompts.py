"""Carry the app's own LangChain prompt over to a dprag mechanism.

A LangChain RAG app has a prompt with a context and a question variable
(``ChatPromptTemplate.from_template("Answer from {context}: {question}")``).
dprag mechanisms build each per-document prompt from a ``str.format`` template
with ``{context}`` and ``{question}`` fields (:mod:`dprag_core.prompts`) and fill
it themselves: each voter's prompt gets *that voter's* documents as its
context (one privacy unit's chunks for DP-KSA's responses and DP-ICL), never the
whole retrieved set. :func:`context_template` turns the app's prompt into such a
template; ``DPRAGChain(prompt=...)`` puts it into (a copy of) the mechanism with
:func:`~dprag_core.algorithms.templates.with_context_template`. The public
prompts (no documents: DPSparseVote's non-RAG row, DP-KSA's zero-shot answer,
the public fallback) stay the mechanism's own.

A chat prompt's messages are joined, in order, into one text (blank line
between them): dprag's models take one user message per prompt. Partial
variables are filled in; any other required variable is an error that names
the variables the prompt must take. Literal braces in the prompt are escaped.

>>> from langchain_core.prompts import ChatPromptTemplate
>>> prompt = ChatPromptTemplate.from_messages(
...     [("system", "Answer from the records only."), ("human", "{context}\\n\\nQ: {question}")]
... )
>>> print(context_template(prompt))
Answer from the records only.
<BLANKLINE>
{context}
<BLANKLINE>
Q: {question}
"""

from __future__ import annotations

from typing import Any

from langchain_core.prompts import BasePromptTemplate
from langchain_core.prompts.chat import BaseChatPromptTemplate
from langchain_core.prompts.string import StringPromptTemplate

from langchain_dprag._compat import message_text

__all__ = ["context_template"]

_CONTEXT = "\x00dprag-context\x00"
_QUESTION = "\x00dprag-question\x00"


def _render(prompt: BasePromptTemplate[Any], values: dict[str, str]) -> str:
    if isinstance(prompt, BaseChatPromptTemplate):
        return "\n\n".join(message_text(m) for m in prompt.format_messages(**values))
    return str(prompt.format(**values))


def _template(prompt: BasePromptTemplate[Any], values: dict[str, str]) -> str:
    text = _render(prompt, values).replace("{", "{{").replace("}", "}}")
    return text.replace(_CONTEXT, "{context}").replace(_QUESTION, "{question}")


def context_template(
    prompt: BasePromptTemplate[Any], *, context: str = "context", question: str = "question"
) -> str:
    """The ``{context}``/``{question}`` template of a ``PromptTemplate`` / ``ChatPromptTemplate``.

    ``context`` and ``question`` name the prompt's variables for the documents
    and the question (``question="input"`` for ``create_retrieval_chain``'s
    prompts). The prompt must take exactly these two (partials aside), and show
    each once it is formatted.

    >>> from langchain_core.prompts import PromptTemplate
    >>> context_template(PromptTemplate.from_template("{docs} {question}"))
    Traceback (most recent call last):
    ...
    ValueError: prompt must take the variables 'context' and 'question' (it takes ['docs', \
'question']): name them (DPRAGChain: input_key names the question) or fill the others with \
prompt.partial(...)
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
            "name them (DPRAGChain: input_key names the question) or fill the others with "
            "prompt.partial(...)"
        )
    template = _template(prompt, {context: _CONTEXT, question: _QUESTION})
    for name, field in ((context, "{context}"), (question, "{question}")):
        if field not in template:
            raise ValueError(f"prompt must show the variable {name!r} once it is formatted")
    return template
