"""One outcome per prompt, on a fixed request schedule: how mechanisms call a TextModel.

A hosted API refuses some prompts (an HTTP 400 ``content_filter``, a tokenizer
that rejects ``<|endoftext|>``), and whether it refuses is decided by what the
prompt holds: a document. A mechanism that let that failure end the query, or
that re-sent the batch prompt by prompt after it, would show whether the
document was retrieved (an error against an answer; 1 call against 9). So the
text mechanisms (DP-KSA, DPAnswerVote) read a model through
:func:`generate_each`: what is sent is fixed by public numbers (how many prompts,
how long each may be) and never depends on an outcome, and each prompt's outcome
is its completion or ``None`` (a *public abstain*: the mechanism counts it as an
empty response).

- A :class:`~dprag_core.models.base.PerPromptTextModel` (dprag's LangChain and
  LlamaIndex wrappers and the served model: one request per prompt; the
  in-process engines: one batch, which no single prompt can make fail) answers
  in one ``generate_each`` call.
- Any other :class:`~dprag_core.models.base.TextModel` (your own class) is
  called once per prompt, ``generate([prompt])``, always: n prompts are n calls
  of one prompt each, whatever any of them returns, and a call that raises or
  returns anything but one string is that prompt's ``None``.

Why a mechanism's claim is unchanged: a prompt's outcome is a function of that
prompt alone (its unit's or voter's documents and the public question), when a
failure is either decided by the prompt (a content filter) or independent of the
prompts (a transient error): one unit still changes one response.

>>> class Api:  # refuses what mentions "forbidden"
...     calls = 0
...     def generate(self, prompts, *, max_new_tokens=64):
...         Api.calls += 1
...         if any("forbidden" in p for p in prompts): raise ValueError("content_filter")
...         return ["ok"] * len(prompts)
>>> generate_each(Api(), ["a", "forbidden b", "c"], max_new_tokens=8), Api.calls
(['ok', None, 'ok'], 3)
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag_core.models.base import PerPromptTextModel, TextModel
from dprag_core.models.codec import check_prompts
from dprag_core.validation import positive_int

__all__ = ["generate_each"]


def generate_each(
    model: TextModel, prompts: Sequence[str], *, max_new_tokens: int
) -> list[str | None]:
    """Each prompt's completion, or None where its own call failed (module docstring).

    A :class:`~dprag_core.models.base.PerPromptTextModel` must return one outcome
    per prompt (a ``ValueError`` otherwise: a broken model, not a prompt's outcome).
    """
    prompts = check_prompts(prompts)
    limit = positive_int("max_new_tokens", max_new_tokens)
    if isinstance(model, PerPromptTextModel):
        outcomes = model.generate_each(prompts, max_new_tokens=limit)
        if not isinstance(outcomes, list) or len(outcomes) != len(prompts):
            raise ValueError("generate_each must return one outcome per prompt")
        return [o if isinstance(o, str) else None for o in outcomes]
    return [_alone(model, prompt, limit) for prompt in prompts]


def _alone(model: TextModel, prompt: str, limit: int) -> str | None:
    """``model.generate([prompt])``'s one string, or None (its error dropped)."""
    try:
        out = model.generate([prompt], max_new_tokens=limit)
    except Exception:
        return None
    return out[0] if isinstance(out, list) and len(out) == 1 and isinstance(out[0], str) else None
