"""LlamaIndexTextModel's public width (issue 36 case 2, for hosted APIs): every prompt keeps
its last ``max_prompt_bytes`` UTF-8 bytes, so an LLM that refuses prompts over its window
answers one holding a ~40 000-byte document; the mutation (no cut) fails on it alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field

import llamaindex_dprag.llms as li_llms
from dprag_core.errors import PrivateDataError
from llamaindex_dprag import LlamaIndexTextModel

WINDOW = 2000
SHORT = "Context: Alice Martin was treated with aspirin.\nQuestion: Which treatment?\nAnswer:"
LONG = "Context: " + "Alice Martin, a long record. " * 1400 + SHORT


class Windowed(CustomLLM):
    """Refuses a prompt over its window (bytes); records the length of each prompt."""

    lengths: list[int] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="windowed")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if len(prompt.encode()) > WINDOW:
            raise ValueError("context_length_exceeded")
        self.lengths.append(len(prompt.encode()))
        return CompletionResponse(text="aspirin")

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return self.complete(prompt)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_long_document_is_cut_to_the_public_width(concurrency: int) -> None:
    llm = Windowed()
    model = LlamaIndexTextModel(llm, max_concurrency=concurrency, max_prompt_bytes=1500)
    assert model.generate([SHORT, LONG]) == ["aspirin", "aspirin"]
    assert asyncio.run(model.agenerate([LONG])) == ["aspirin"]
    assert llm.lengths[0] == len(SHORT) and max(llm.lengths) <= 1500
    assert LlamaIndexTextModel(llm).max_prompt_bytes == 16384  # the public default


def test_without_the_cut_the_long_document_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(li_llms, "keep_last_bytes", lambda text, width: text)
    model = LlamaIndexTextModel(Windowed(), max_concurrency=1, max_prompt_bytes=1500)
    assert model.generate([SHORT]) == ["aspirin"]
    with pytest.raises(PrivateDataError):
        model.generate([LONG])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_the_width_is_checked(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="max_prompt_bytes"):
        LlamaIndexTextModel(Windowed(), max_prompt_bytes=bad)
