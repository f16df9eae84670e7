"""DPAnswerVote through DPQueryEngine, over a LlamaIndex LLM (LlamaIndexTextModel).

The engine has no code of its own for the mechanism: the audit of its selection on
the keys that reached it through the engine (tests/answer_vote_audit.py) stays within
the claim, and the mutations exceed it. ``Response.metadata`` says where the answer
came from, sync and streaming; a provider refusing one record makes that voter abstain.
"""

from __future__ import annotations

from typing import Any

import pytest
from answer_vote_audit import (
    DELTA,
    EPSILON,
    HalfNoise,
    KeyRecorder,
    NoLnTerm,
    audit_keys,
    ranking,
    record_answer,
)
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPAnswerVote
from dprag_core.budget import Budget
from dprag_core.stop_reasons import shown_text
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel

M = 20


class ReaderLLM(CustomLLM):
    """Answers with the record in its prompt (a guess without one); refuses "Forbidden"."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="reader-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "Forbidden" in prompt:
            raise ValueError("content filter")
        if "«" not in prompt:  # the question alone (the public fallback)
            return CompletionResponse(text="Aspirin, I guess.")
        return CompletionResponse(text=record_answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class RankRetriever(BaseRetriever):
    """A fixed ranking, all of it (the engine takes the first n units)."""

    def __init__(self, rows: list[Any]) -> None:
        super().__init__()
        self.rows = rows

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(id_=i, text=t, metadata={"who": u}), score=0.9 - n / 100)
            for n, (i, u, t) in enumerate(self.rows)
        ]


def reader() -> LlamaIndexTextModel:
    return LlamaIndexTextModel(ReaderLLM())


def engine_of(mechanism: Any, rows: list[Any], **options: Any) -> DPQueryEngine:
    return DPQueryEngine.from_retriever(
        RankRetriever(rows),
        mechanism=mechanism,
        returns_everything=True,
        unit_key="who",
        budget=InMemoryCorpusAccountant(Budget(1000.0, 0.5)),
        **options,
    )


def keys_through_engine(cls: type[KeyRecorder], name: str) -> list[list[str]]:
    seen = []
    for new in (False, True):
        mech = cls(reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
        engine_of(mech, ranking(name, with_new_unit=new)).query("Which drug?")
        seen.append(mech.seen[0])
    return seen


@pytest.mark.parametrize("name", ["skew", "lone"])
def test_engine_audit_within_the_claim(name: str) -> None:
    keys_d, keys_d_prime = keys_through_engine(KeyRecorder, name)
    assert sorted(keys_d) != sorted(keys_d_prime)  # one voter moved
    mech = KeyRecorder(reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    bound = audit_keys(mech, keys_d, keys_d_prime)
    assert bound <= EPSILON and (name == "lone" or bound > 0.7 * EPSILON), bound


@pytest.mark.parametrize(("cls", "name"), [(NoLnTerm, "lone"), (HalfNoise, "skew-2")])
def test_engine_audit_catches_the_mutations(cls: type[KeyRecorder], name: str) -> None:
    keys_d, keys_d_prime = keys_through_engine(cls, name)
    mutated = cls(reader(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mutated, keys_d, keys_d_prime) > EPSILON


ROWS = [(f"r{i}", f"u{i}", "«The drug is aspirin.»") for i in range(5)]
ROWS.append(("r5", "u5", "Forbidden: «the drug is aspirin.»"))


def test_metadata_says_where_the_answer_came_from() -> None:
    mech = DPAnswerVote(reader(), m=6, k=1, epsilon=40.0, delta=1e-4)
    response = engine_of(mech, ROWS).query("Which drug?")
    assert response.response == "Aspirin"  # the refused record's voter abstained
    assert response.metadata["answer_source"] == "documents"
    assert response.metadata["details"]["answer_source"] == "documents"
    streamed = engine_of(mech, ROWS, streaming=True).query("Which drug?")
    assert str(streamed) == "Aspirin"
    assert streamed.metadata["answer_source"] == "documents"


def test_an_empty_answer_and_the_public_fallback_say_so() -> None:
    silent = DPAnswerVote(reader(), m=6, k=1, epsilon=0.01, delta=1e-4)
    response = engine_of(silent, ROWS).query("Which drug?")
    meta = response.metadata
    assert (response.response, meta["answer_source"]) == ("", "none")
    assert shown_text(response.response or "", meta["details"]) == (
        "(no answer released: null_token)"
    )
    fallback = engine_of(silent, ROWS, public_fallback=True).query("Which drug?")
    assert fallback.metadata["answer_source"] == "model"
    assert shown_text(fallback.response or "", fallback.metadata["details"]).endswith(
        "(from the model alone, not the records)"
    )
