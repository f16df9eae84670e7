"""The kit's envelope suite (dprag_core.testing.models) on a text model of an app's own.

``TestPlainModel`` is how an app proves its model; the mutation: a model whose
endpoint refuses prompts longer than 1000 bytes fails the suite at the default
width, and passes once the app wraps it at a width it holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dprag_core.testing.models import TextModelEnvelope


class Plain:
    """An app's own TextModel."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return ["aspirin"] * len(prompts)


class Windowed(Plain):
    """An endpoint with a 1000-byte context: a longer prompt is an HTTP 400."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        if any(len(p.encode()) > 1000 for p in prompts):
            raise ValueError("context length exceeded")
        return super().generate(prompts, max_new_tokens=max_new_tokens)


class TestPlainModel(TextModelEnvelope):
    def model(self) -> Plain:
        return Plain()


class TestWindowedModelAtItsWidth(TextModelEnvelope):
    max_prompt_bytes = 1000

    def model(self) -> Windowed:
        return Windowed()


class WindowedAtTheDefaultWidth(TextModelEnvelope):
    def model(self) -> Windowed:
        return Windowed()


@pytest.mark.parametrize(
    "test",
    [
        "test_it_answers_the_widest_prompt_the_envelope_sends",
        "test_a_long_document_changes_no_request",
    ],
)
def test_a_model_narrower_than_the_envelope_fails_the_suite(test: str) -> None:
    with pytest.raises((AssertionError, ValueError)):
        getattr(WindowedAtTheDefaultWidth(), test)()


def test_a_dprag_model_is_not_the_suites_subject() -> None:
    from dprag_core.models.text_envelope import PublicEnvelope

    class Wrapped(TextModelEnvelope):
        def model(self) -> PublicEnvelope:
            return PublicEnvelope(Plain())

    with pytest.raises(AssertionError, match="applies its own envelope"):
        Wrapped().test_a_mechanism_puts_it_in_the_envelope()
