"""The app's LlamaIndex ``text_qa_template``, as a mechanism's context template.

A LlamaIndex RAG app answers with a ``text_qa_template`` (a ``PromptTemplate``,
``ChatPromptTemplate`` or ``RichPromptTemplate``) over two variables:
``context_str`` (the retrieved context) and ``query_str`` (the question). A dprag
mechanism builds its per-document prompts from a ``str.format`` template over
``{context}`` and ``{question}`` (:mod:`dprag_core.prompts`), so
:func:`context_template` renders the app's template with markers in place of
the two variables (a chat template through LlamaIndex's own
``messages_to_prompt``, as for a completion LLM) and turns the markers into the
mechanism's fields; every other brace in the text is kept literally. Any other
variable must be filled first (``template.partial_format(name=...)``).

What ``context_str`` receives differs from a stock query engine: one prompt's
share of the documents (one voter's k documents, one privacy unit for DP-KSA
and DP-ICL), never the whole retrieved set.

>>> from llama_index.core.prompts import PromptTemplate
>>> context_template(PromptTemplate("Notes:\\n{context_str}\\nQ: {query_str}"))
'Notes:\\n{context}\\nQ: {question}'
"""

from __future__ import annotations

from llama_index.core.prompts import BasePromptTemplate

__all__ = ["TEMPLATE_VARIABLES", "context_template"]

TEMPLATE_VARIABLES = ("context_str", "query_str")
"""The variables a ``text_qa_template`` must use: LlamaIndex's names for the
retrieved context and the question."""

_CONTEXT = "\x00dprag-context\x00"
_QUESTION = "\x00dprag-question\x00"


def _unfilled(template: BasePromptTemplate) -> list[str]:
    """The template's variables that are neither ours nor filled in advance."""
    to_user = {v: k for k, v in (template.template_var_mappings or {}).items()}
    filled = set(template.kwargs) | set(template.function_mappings or {})
    names = (to_user.get(v, v) for v in template.template_vars)
    return sorted({n for n in names if n not in TEMPLATE_VARIABLES and n not in filled})


def context_template(template: object, *, parameter: str = "text_qa_template") -> str:
    """The ``str.format`` template (``{context}``, ``{question}``) of a LlamaIndex prompt.

    Raises a TypeError for anything but a LlamaIndex prompt template, and a
    ValueError naming the variables when the template does not use both
    ``context_str`` and ``query_str`` or needs another one.

    >>> from llama_index.core.prompts import PromptTemplate
    >>> context_template(PromptTemplate("{context_str} {query_str} {tone}"))
    Traceback (most recent call last):
    ...
    ValueError: text_qa_template may use only {context_str} and {query_str}, but also needs tone: fill it first with text_qa_template.partial_format(tone=...)
    """  # noqa: E501
    if not isinstance(template, BasePromptTemplate):
        raise TypeError(
            f"{parameter} must be a LlamaIndex PromptTemplate or ChatPromptTemplate, "
            f"got {type(template).__name__}"
        )
    extra = _unfilled(template)
    if extra:
        names = ", ".join(extra)
        fills = ", ".join(f"{n}=..." for n in extra)
        raise ValueError(
            f"{parameter} may use only {{context_str}} and {{query_str}}, but also needs "
            f"{names}: fill it first with {parameter}.partial_format({fills})"
        )
    text = template.format(context_str=_CONTEXT, query_str=_QUESTION)
    missing = [
        n for n, m in zip(TEMPLATE_VARIABLES, (_CONTEXT, _QUESTION), strict=True) if m not in text
    ]
    if missing:
        raise ValueError(
            f"{parameter} must use {{context_str}} (the retrieved context) and {{query_str}} "
            f"(the question); it does not use {', '.join(missing)}"
        )
    escaped = text.replace("{", "{{").replace("}", "}}")
    return escaped.replace(_CONTEXT, "{context}").replace(_QUESTION, "{question}")
