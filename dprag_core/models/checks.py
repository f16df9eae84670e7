"""Construction-time model checks, with the fix in the message.

A mechanism needs either a :class:`~dprag_core.models.base.TokenModel`
(next-token scores: the voting mechanisms, DP-ICL) or a
:class:`~dprag_core.models.base.TextModel` (completions: DP-KSA, the text
baselines). A LangChain chat model or a LlamaIndex ``LLM`` passed as it is
would fail only at query time (a LangChain model even has a ``generate``
method, with another meaning), so both are refused here, when the mechanism is
built, with the wrapper to use. Frameworks are recognised by the module of the
object's class, without importing them.

>>> check_text_model(object())
Traceback (most recent call last):
...
TypeError: model must be a TextModel (with generate(prompts, max_new_tokens=)), got object
"""

from __future__ import annotations

from dprag_core.models.base import LookaheadModel, TextModel, TokenModel

__all__ = ["check_lookahead_model", "check_text_model", "check_token_model", "framework_of"]

_WRAPPERS = {
    "LangChain": "LangChainTextModel(model) (from langchain_dprag import LangChainTextModel)",
    "LlamaIndex": "LlamaIndexTextModel(llm) (from llamaindex_dprag import LlamaIndexTextModel)",
}


def framework_of(model: object) -> str | None:
    """``"LangChain"`` or ``"LlamaIndex"`` for a framework's own model object, else None.

    dprag's adapters (``langchain_dprag``, ``llamaindex_dprag``) are not framework objects.

    >>> framework_of(object()) is None
    True
    """
    top = type(model).__module__.split(".")[0]
    if top.startswith("langchain") and top != "langchain_dprag":
        return "LangChain"
    if top == "llama_index":
        return "LlamaIndex"
    return None


def _got(model: object) -> str:
    framework = framework_of(model)
    kind = f" (a {framework} model)" if framework else ""
    return f"{type(model).__name__}{kind}"


def check_text_model(model: object, *, parameter: str = "model") -> TextModel:
    """``model`` if it is a dprag TextModel; a TypeError with the wrapper to use otherwise."""
    framework = framework_of(model)
    if framework is not None:
        raise TypeError(
            f"{parameter} must be a dprag TextModel, got {_got(model)}: wrap it with "
            f"{_WRAPPERS[framework]}"
        )
    if not isinstance(model, TextModel):
        raise TypeError(
            f"{parameter} must be a TextModel (with generate(prompts, max_new_tokens=)), "
            f"got {_got(model)}"
        )
    return model


def check_token_model(model: object, *, parameter: str = "model") -> TokenModel:
    """``model`` if it is a TokenModel; a TypeError saying what to use otherwise.

    >>> check_token_model(object())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: model must implement the TokenModel protocol (next-token scores), got object: ...
    """
    if isinstance(model, TokenModel) and framework_of(model) is None:
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
