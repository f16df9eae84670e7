"""A pytest suite a text model of your own subclasses: it works inside the public envelope.

A mechanism puts a :class:`~dprag_core.models.base.TextModel` of your own (a
class with ``generate(prompts, max_new_tokens=)``) in the public envelope of
text-only models when it is built
(:func:`~dprag_core.models.checks.check_text_model`):
:class:`~dprag_core.models.text_envelope.PublicEnvelope` cuts every prompt to
its last ``max_prompt_bytes`` UTF-8 bytes before your model sees it, so what
your model (or its endpoint) receives depends on public numbers only, never on
how long a retrieved document is. :class:`TextModelEnvelope` checks that your
model keeps its side: it is accepted and enveloped, it answers the widest
prompt the envelope lets through (an endpoint whose context is smaller would
refuse a query for the corpus that holds a long document only), one string per
prompt, and a long document changes no request your model receives but the
cut text. Give :meth:`TextModelEnvelope.model` and, if you wrap your model
yourself, ``max_prompt_bytes``.

>>> class Mine:  # an app's own model
...     __module__ = "app"
...     def generate(self, prompts, *, max_new_tokens=64): return ["ok"] * len(prompts)
>>> class TestMine(TextModelEnvelope):
...     def model(self): return Mine()
>>> TestMine().test_a_long_document_changes_no_request()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from dprag_core.models.base import PerPromptTextModel, TextModel
from dprag_core.models.checks import check_text_model
from dprag_core.models.envelope import DEFAULT_PROMPT_BYTES
from dprag_core.models.outcomes import generate_each
from dprag_core.models.text_envelope import PublicEnvelope, applies_envelope

__all__ = ["Request", "TextModelEnvelope"]

Request = tuple[int, int, int]
"""What one call sent: (prompts, longest prompt in UTF-8 bytes, ``max_new_tokens``)."""


class _Recorder:
    """Your model, with what each call sends recorded."""

    def __init__(self, inner: TextModel) -> None:
        self.inner = inner
        self.requests: list[Request] = []

    def _record(self, prompts: Sequence[str], max_new_tokens: int) -> None:
        longest = max((len(p.encode("utf-8")) for p in prompts), default=0)
        self.requests.append((len(prompts), longest, max_new_tokens))

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        self._record(prompts, max_new_tokens)
        return list(self.inner.generate(prompts, max_new_tokens=max_new_tokens))


class _PerPromptRecorder(_Recorder):
    """A recorder for a model that answers each prompt in one call (``generate_each``)."""

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        self._record(prompts, max_new_tokens)
        assert isinstance(self.inner, PerPromptTextModel)
        return self.inner.generate_each(prompts, max_new_tokens=max_new_tokens)


class TextModelEnvelope(ABC):
    """Your text model inside the public envelope (module docstring).

    ``max_prompt_bytes`` is the envelope's width (default: the one a mechanism
    applies, 16384); ``max_new_tokens`` the answer length the tests ask for.
    """

    max_prompt_bytes: ClassVar[int] = DEFAULT_PROMPT_BYTES
    max_new_tokens: ClassVar[int] = 8

    @abstractmethod
    def model(self) -> TextModel:
        """A fresh instance of your model."""

    def _enveloped(self) -> tuple[PublicEnvelope, _Recorder]:
        mine = self.model()
        kind = _PerPromptRecorder if isinstance(mine, PerPromptTextModel) else _Recorder
        recorder = kind(mine)
        return PublicEnvelope(recorder, max_prompt_bytes=self.max_prompt_bytes), recorder

    def _prompts(self, long: bool) -> list[str]:
        """A question with a document each: the first one long (``long``) or short."""
        short = "Context: Ann takes aspirin.\nQuestion: Which drug?"
        first = "Context: " + "Ann's record, naïve résumé. " * (self.max_prompt_bytes // 8) + short
        return [first if long else short, short, short]

    def test_a_mechanism_puts_it_in_the_envelope(self) -> None:
        mine = self.model()
        assert not applies_envelope(mine), (
            "a dprag model applies its own envelope: this suite is for a model of your own"
        )
        checked = check_text_model(mine)
        assert isinstance(checked, PublicEnvelope) and checked.inner is mine

    def test_it_answers_the_widest_prompt_the_envelope_sends(self) -> None:
        envelope, recorder = self._enveloped()
        widest = "Context: naïve " + "é" * self.max_prompt_bytes + "\nQuestion: Which drug?"
        out = envelope.generate([widest, "Which drug?"], max_new_tokens=self.max_new_tokens)
        assert isinstance(out, list) and len(out) == 2 and all(isinstance(o, str) for o in out)
        assert recorder.requests[0][1] <= self.max_prompt_bytes
        outcomes = generate_each(envelope, [widest], max_new_tokens=self.max_new_tokens)
        assert outcomes[0] is not None, "the model refused the widest prompt the envelope sends"

    def test_no_request_is_wider_than_the_envelope(self) -> None:
        envelope, recorder = self._enveloped()
        envelope.generate(self._prompts(long=True), max_new_tokens=self.max_new_tokens)
        generate_each(envelope, self._prompts(long=True), max_new_tokens=self.max_new_tokens)
        assert recorder.requests
        assert all(longest <= self.max_prompt_bytes for _, longest, _ in recorder.requests)

    def test_a_long_document_changes_no_request(self) -> None:
        """The calls, their prompt counts and lengths asked are the same for D and D + x."""
        sent: list[list[tuple[int, int]]] = []
        answers: list[list[bool]] = []
        for long in (False, True):
            envelope, recorder = self._enveloped()
            out = envelope.generate(self._prompts(long), max_new_tokens=self.max_new_tokens)
            each = generate_each(envelope, self._prompts(long), max_new_tokens=self.max_new_tokens)
            sent.append([(n, limit) for n, _, limit in recorder.requests])
            answers.append([isinstance(o, str) for o in [*out, *each]])
        assert sent[0] == sent[1], f"the requests differ: {sent}"
        assert answers[0] == answers[1], f"a long document changed what was answered: {answers}"
