"""A user's own text model, inside the public envelope of text-only models.

dprag's own text models apply the envelope themselves
(:mod:`dprag_core.models.envelope`): ``HFTextModel`` and the server engines cut
a prompt to the public ``prompt_width`` in tokens, ``LangChainTextModel`` and
``LlamaIndexTextModel`` to the public ``max_prompt_bytes`` in UTF-8 bytes. A
model of the user's own (any class with ``generate(prompts,
max_new_tokens=)``) applies nothing that dprag can see, so a long document
would make its requests longer, or make its endpoint refuse them, for the
corpus that holds it only. :class:`PublicEnvelope` cuts every prompt to its
last ``max_prompt_bytes`` bytes (whole characters) before the model sees it;
the text mechanisms put every user model in it when they are built
(:func:`~dprag_core.models.checks.check_text_model`), and a user who wants
another width wraps the model first.

>>> class Echo:  # an app's own model
...     __module__ = "app"
...     def generate(self, prompts, *, max_new_tokens=64): return list(prompts)
>>> PublicEnvelope(Echo(), max_prompt_bytes=4).generate(["context: naïve"])
['ïve']
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag_core.models.base import TextModel
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES, keep_last_bytes
from dprag_core.models.outcomes import generate_each
from dprag_core.validation import positive_int

__all__ = ["DPRAG_PACKAGES", "PublicEnvelope", "applies_envelope"]

DPRAG_PACKAGES = ("dprag_core", "langchain_dprag", "llamaindex_dprag")
"""The packages whose text models apply the public envelope themselves."""


def applies_envelope(model: object) -> bool:
    """True when ``model``'s ``generate`` is dprag's own (it applies the envelope itself).

    Read from the type: the module of the class in the MRO that defines
    ``generate``. A user's subclass that overrides ``generate`` is the user's own model.

    >>> applies_envelope(PublicEnvelope.__new__(PublicEnvelope)), applies_envelope(object())
    (True, False)
    """
    for cls in type(model).__mro__:
        if "generate" in vars(cls):
            return str(cls.__module__).split(".")[0] in DPRAG_PACKAGES
    return False


class PublicEnvelope:
    """``model`` (a :class:`~dprag_core.models.base.TextModel`) with every prompt cut to
    its last ``max_prompt_bytes`` UTF-8 bytes (public; default 16384), before it is sent.

    Set ``max_prompt_bytes`` below the model's context window minus the answer's
    ``max_new_tokens``, in tokens: a byte-level tokenizer makes at most one token
    per byte (:mod:`dprag_core.models.envelope`). ``inner`` is the wrapped model.

    >>> class Count:
    ...     __module__ = "app"
    ...     def generate(self, prompts, *, max_new_tokens=64):
    ...         return [str(len(p.encode())) for p in prompts]
    >>> PublicEnvelope(Count(), max_prompt_bytes=10).generate(["x" * 50, "short"])
    ['10', '5']
    """

    def __init__(self, model: TextModel, *, max_prompt_bytes: int = DEFAULT_PROMPT_BYTES) -> None:
        if not isinstance(model, TextModel):
            raise TypeError(
                "model must be a TextModel (with generate(prompts, max_new_tokens=)), "
                f"got {type(model).__name__}"
            )
        self.inner = model
        self.max_prompt_bytes = positive_int("max_prompt_bytes", max_prompt_bytes)

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """The inner model's completions of the cut prompts."""
        cut = [keep_last_bytes(p, self.max_prompt_bytes) for p in prompts]
        return list(self.inner.generate(cut, max_new_tokens=max_new_tokens))

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """Each cut prompt's completion, or None where its own call failed: the inner
        model's own ``generate_each`` where it has one, else one call per prompt
        (:func:`~dprag_core.models.outcomes.generate_each`: one fixed schedule either way)."""
        cut = [keep_last_bytes(p, self.max_prompt_bytes) for p in prompts]
        return generate_each(self.inner, cut, max_new_tokens=max_new_tokens)

    def __repr__(self) -> str:
        return (
            f"PublicEnvelope({type(self.inner).__name__}, max_prompt_bytes={self.max_prompt_bytes})"
        )
