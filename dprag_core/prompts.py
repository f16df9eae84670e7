"""Default prompt templates, shared by the mechanisms and the project's reader LM.

Templates are plain ``str.format`` strings with ``{context}`` and ``{question}``
fields (``{keywords}`` for DP-KSA's final answer). Token and text models wrap
the filled template as a user message with the tokenizer's chat template when
it has one.

>>> RAG_TEMPLATE.format(context="Aspirin treats headache.", question="What treats headache?")
'Context:\\nAspirin treats headache.\\n\\nQuestion: What treats headache?\\nAnswer:'
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "KEYWORDS_TEMPLATE",
    "NO_CONTEXT_TEMPLATE",
    "RAG_TEMPLATE",
    "join_context",
]

RAG_TEMPLATE = "Context:\n{context}\n\nQuestion: {question}\nAnswer:"
NO_CONTEXT_TEMPLATE = "Question: {question}\nAnswer:"
KEYWORDS_TEMPLATE = "Keywords: {keywords}\n\nQuestion: {question}\nAnswer:"


def join_context(texts: Sequence[str]) -> str:
    """Join document texts into one context block (empty padding texts are skipped)."""
    return "\n".join(t for t in texts if t)
