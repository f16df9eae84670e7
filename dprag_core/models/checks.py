"""Construction-time model checks, with the fix in the message.

A mechanism needs either a :class:`~dprag_core.models.base.TokenModel`
(next-token scores: the voting mechanisms, DP-ICL) or a
:class:`~dprag_core.models.base.TextModel` (completions: DP-KSA, the text
baselines). A LangChain chat model or a LlamaIndex ``LLM`` passed as it is
would fail only at query time (a LangChain model even has a ``generate``
method, with another meaning), and worse, its callbacks (LangChain's
``callbacks``, ``set_debug``, LangSmith; LlamaIndex's ``callback_manager`` and
instrumentation) would receive every private prompt. So both are refused here,
when the mechanism is built, with the wrapper to use
(``LangChainTextModel``, ``LlamaIndexTextModel``: they call the model where no
callback sees it).

The boundary is by type, never by module name: a model is refused when any
class of its MRO comes from a LangChain or LlamaIndex package (an app's own
``LLM`` or ``CustomLLM`` subclass, defined in the app's own module, included),
or when it carries framework callbacks (a ``callbacks`` or ``callback_manager``
attribute that is set). Frameworks are recognised by the modules of the
classes in the MRO, without importing them.

A user's own plain ``TextModel`` (a class with ``generate(prompts,
max_new_tokens=)`` whose ``generate`` is not dprag's) gets the public envelope
of text-only models (:mod:`dprag_core.models.envelope`): :func:`check_text_model`
returns it wrapped in :class:`~dprag_core.models.text_envelope.PublicEnvelope`,
which cuts every prompt to its last ``max_prompt_bytes`` UTF-8 bytes before the
model sees it (wrap it yourself to choose another width).

>>> check_text_model(object())
Traceback (most recent call last):
...
TypeError: model must be a TextModel (with generate(prompts, max_new_tokens=)), got object
"""

from __future__ import annotations

from dprag_core.models.base import LookaheadModel, TextModel, TokenModel
from dprag_core.models.text_envelope import PublicEnvelope, applies_envelope

__all__ = [
    "CALLBACK_ATTRIBUTES",
    "callback_attributes",
    "check_lookahead_model",
    "check_text_model",
    "check_token_model",
    "framework_of",
]

CALLBACK_ATTRIBUTES = ("callbacks", "callback_manager")
"""Attributes through which a framework model reports its calls (LangChain, LlamaIndex)."""

_WRAPPERS = {
    "LangChain": "LangChainTextModel(model) (from langchain_dprag import LangChainTextModel)",
    "LlamaIndex": "LlamaIndexTextModel(llm) (from llamaindex_dprag import LlamaIndexTextModel)",
}


def framework_of(model: object) -> str | None:
    """``"LangChain"`` or ``"LlamaIndex"`` when a class of ``type(model).__mro__`` is theirs.

    By type: an app's own subclass of a framework model (defined in the app's
    module) is a framework object. dprag's adapters (``langchain_dprag``,
    ``llamaindex_dprag``) are not.

    >>> framework_of(object()) is None
    True
    """
    for cls in type(model).__mro__:
        top = str(getattr(cls, "__module__", "") or "").split(".")[0]
        if top.startswith("langchain") and top != "langchain_dprag":
            return "LangChain"
        if top.startswith("llama_index"):
            return "LlamaIndex"
    return None


def callback_attributes(model: object) -> list[str]:
    """The framework callback attributes ``model`` carries, set (:data:`CALLBACK_ATTRIBUTES`).

    >>> class Traced:
    ...     callbacks = [print]
    >>> callback_attributes(Traced()), callback_attributes(object())
    (['callbacks'], [])
    """
    return [name for name in CALLBACK_ATTRIBUTES if getattr(model, name, None) is not None]


def _got(model: object) -> str:
    framework = framework_of(model)
    kind = f" (a {framework} model)" if framework else ""
    return f"{type(model).__name__}{kind}"


def _refuse_callbacks(model: object, parameter: str) -> None:
    found = callback_attributes(model)
    if found:
        raise TypeError(
            f"{parameter} carries framework callbacks ({', '.join(found)} of "
            f"{type(model).__name__}): they would receive every private prompt. Wrap a "
            f"LangChain model with {_WRAPPERS['LangChain']}, a LlamaIndex LLM with "
            f"{_WRAPPERS['LlamaIndex']}, or pass a model without them"
        )


def check_text_model(model: object, *, parameter: str = "model") -> TextModel:
    """``model`` if it is a dprag TextModel (a user's own in the public envelope); a
    TypeError with the fix otherwise (module docstring).

    >>> class Mine:  # an app's own model
    ...     __module__ = "app"
    ...     def generate(self, prompts, *, max_new_tokens=64): return ["ok"] * len(prompts)
    >>> check_text_model(Mine())
    PublicEnvelope(Mine, max_prompt_bytes=16384)
    """
    framework = framework_of(model)
    if framework is not None:
        raise TypeError(
            f"{parameter} must be a dprag TextModel, got {_got(model)}: wrap it with "
            f"{_WRAPPERS[framework]}"
        )
    _refuse_callbacks(model, parameter)
    if not isinstance(model, TextModel):
        raise TypeError(
            f"{parameter} must be a TextModel (with generate(prompts, max_new_tokens=)), "
            f"got {_got(model)}"
        )
    return model if applies_envelope(model) else PublicEnvelope(model)


def check_token_model(model: object, *, parameter: str = "model") -> TokenModel:
    """``model`` if it is a TokenModel; a TypeError saying what to use otherwise.

    >>> check_token_model(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: model must implement the TokenModel protocol (next-token scores), got object: ...
    """
    if isinstance(model, TokenModel) and framework_of(model) is None:
        _refuse_callbacks(model, parameter)
        return model
    framework = framework_of(model)
    text = (
        _WRAPPERS[framework].split(" (")[0]
        if framework is not None
        else "LangChainTextModel(...) / LlamaIndexTextModel(...)"
    )
    raise TypeError(
        f"{parameter} must implement the TokenModel protocol (next-token scores), got "
        f"{_got(model)}: load the weights with HFTokenModel.from_pretrained(path) "
        f"(dprag_core.models.hf), or use a mechanism that needs only text, such as "
        f"DPKSA({text}, ...)"
    )


def check_lookahead_model(model: TokenModel, *, parameter: str = "model") -> LookaheadModel:
    """``model`` if its sessions can look ahead (word-level voting); a TypeError otherwise.

    Checked when the mechanism is built, before any query is charged: the model
    must implement :class:`~dprag_core.models.base.LookaheadModel` (HFTokenModel,
    OpenAICompatModel: a ``check_lookahead()`` method, the declaration), and its
    ``check_lookahead()`` must pass (HFTokenModel refuses caches it cannot rewind).

    >>> class NoLookahead:
    ...     vocab_size, eos_token_ids = 2, frozenset({1})
    ...     def encode(self, text): return [0]
    ...     def decode(self, ids): return ""
    ...     def prefill(self, prompts): ...
    >>> check_lookahead_model(NoLookahead())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: model must be a LookaheadModel for unit='word' ...
    """
    if isinstance(model, LookaheadModel):
        model.check_lookahead()  # a backend's own refusals (HFTokenModel: sliding windows)
        return model
    raise TypeError(
        f"{parameter} must be a LookaheadModel for unit='word' (sessions with "
        f"lookahead(n, stop=) and extend(tokens), declared by a check_lookahead() method), "
        f"got {type(model).__name__}: use unit='token', or HFTokenModel / OpenAICompatModel"
    )
