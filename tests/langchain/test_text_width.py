"""LangChainTextModel's public width (issue 36 case 2, for hosted APIs): a provider refuses a
prompt over its context window, so a long retrieved document once made the query fail.
Every prompt now keeps its last ``max_prompt_bytes`` UTF-8 bytes: a model double that
refuses prompts over its window (as OpenAI's context_length_exceeded does) answers a
prompt holding a ~40 000-byte document, and gets at most the width; the mutation (no
cut) fails on it alone."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from lc_support import EchoChatModel
from pydantic import Field

import langchain_dprag.models as lc_models
from langchain_dprag import LangChainTextModel

WINDOW = 2000  # the double's context window, in bytes
SHORT = "Context: Alice Martin was treated with aspirin.\nQuestion: Which treatment?\nAnswer:"
LONG = "Context: " + "Alice Martin, a long record. " * 1400 + SHORT


class Windowed(EchoChatModel):
    """Refuses a prompt over its window; records the length of each prompt it reads."""

    lengths: list[int] = Field(default_factory=list)

    def reply(self, text: str) -> AIMessage:
        if len(text.encode()) > WINDOW:
            raise ValueError("context_length_exceeded")
        self.lengths.append(len(text.encode()))
        return AIMessage(content="aspirin")


async def test_a_long_document_is_cut_to_the_public_width() -> None:
    model = Windowed()
    text = LangChainTextModel(model, max_prompt_bytes=1500)
    assert text.generate([SHORT, LONG]) == ["aspirin", "aspirin"]
    assert await text.agenerate([LONG]) == ["aspirin"]
    assert model.lengths[0] == len(SHORT) and max(model.lengths) <= 1500
    assert LangChainTextModel(model).max_prompt_bytes == 16384  # the public default


def test_without_the_cut_the_long_document_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lc_models, "keep_last_bytes", lambda text, width: text)
    text = LangChainTextModel(Windowed(), max_prompt_bytes=1500)
    assert text.generate([SHORT]) == ["aspirin"]
    with pytest.raises(ValueError, match="context_length_exceeded"):
        text.generate([LONG])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_the_width_is_checked(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="max_prompt_bytes"):
        LangChainTextModel(Windowed(), max_prompt_bytes=bad)
