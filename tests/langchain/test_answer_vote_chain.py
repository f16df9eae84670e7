"""DPAnswerVote through DPRAGChain, over the chat models LangChain apps call.

The chain has no code of its own for the mechanism: the audit of its selection on the
keys that reached it through the chain (tests/answer_vote_audit.py) stays within the
claim, and the mutations exceed it. Chat models wrapped as apps wrap them
(``.bind``, ``.with_retry``, ``.with_fallbacks``) answer as voters; a content filter
refusing one record makes that voter abstain. Every output says where its answer
came from (``DPRAGOutput.answer_source``).
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
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from lc_support import EchoChatModel

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.algorithms import DPAnswerVote, NonRAG
from dprag_core.budget import Budget
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.stop_reasons import shown_text
from langchain_dprag import DPRAGChain, LangChainTextModel

M = 20


class ReaderChat(EchoChatModel):
    """A chat model that answers with the first line of the record in its prompt."""

    def reply(self, text: str) -> AIMessage:
        return AIMessage(content=record_answer(text))


class FilteredChat(ReaderChat):
    """A hosted chat API whose content filter refuses any prompt mentioning "Forbidden"."""

    def seen(self, stop: list[str] | None, kwargs: dict[str, Any]) -> None:
        pass

    def reply(self, text: str) -> AIMessage:
        if "Forbidden" in text:
            raise ValueError("content filter")
        return super().reply(text)


class Flaky(ReaderChat):
    """Fails its first call (a transient error), then answers."""

    failures: int = 1

    def reply(self, text: str) -> AIMessage:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("try again")
        return super().reply(text)


class RankRetriever(BaseRetriever):
    """The first k of a fixed ranking (a keyword index, a re-ranker...)."""

    rows: list[Any]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        return [Document(page_content=t, id=i, metadata={"who": u}) for i, u, t in self.rows[:k]]


def reader_model() -> LangChainTextModel:
    return LangChainTextModel(ReaderChat())


def chain_of(mechanism: Any, rows: list[Any], **options: Any) -> DPRAGChain:
    return DPRAGChain(
        retriever=RankRetriever(rows=rows),
        retriever_honours_k=True,
        mechanism=mechanism,
        unit_key="who",
        accountant=InMemoryCorpusAccountant(Budget(1000.0, 0.5)),
        **options,
    )


def keys_through_chain(cls: type[KeyRecorder], name: str) -> list[list[str]]:
    seen = []
    for new in (False, True):
        mech = cls(reader_model(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
        chain_of(mech, ranking(name, with_new_unit=new)).invoke("Which drug?")
        seen.append(mech.seen[0])
    return seen


@pytest.mark.parametrize("name", ["skew", "lone"])
def test_chain_audit_within_the_claim(name: str) -> None:
    keys_d, keys_d_prime = keys_through_chain(KeyRecorder, name)
    assert sorted(keys_d) != sorted(keys_d_prime)  # one voter moved
    mech = KeyRecorder(reader_model(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    bound = audit_keys(mech, keys_d, keys_d_prime)
    assert bound <= EPSILON and (name == "lone" or bound > 0.7 * EPSILON), bound


@pytest.mark.parametrize(("cls", "name"), [(NoLnTerm, "lone"), (HalfNoise, "skew-2")])
def test_chain_audit_catches_the_mutations(cls: type[KeyRecorder], name: str) -> None:
    keys_d, keys_d_prime = keys_through_chain(cls, name)
    mutated = cls(reader_model(), m=M, k=1, epsilon=EPSILON, delta=DELTA)
    assert audit_keys(mutated, keys_d, keys_d_prime) > EPSILON


AGREEING = [(f"r{i}", f"u{i}", "The drug is aspirin.") for i in range(6)]


@pytest.mark.parametrize(
    "model",
    [
        ReaderChat().bind(stop=["\n"]),
        Flaky().with_retry(stop_after_attempt=2, wait_exponential_jitter=False),
        FilteredChat().with_fallbacks([ReaderChat()]),
    ],
    ids=["bind", "with_retry", "with_fallbacks"],
)
def test_wrapped_chat_models_answer_as_voters(model: Any) -> None:
    rows = [*AGREEING[:5], ("r5", "u5", "Forbidden: the drug is aspirin.")]
    mech = DPAnswerVote(LangChainTextModel(model), m=6, k=1, epsilon=40.0, delta=1e-4)
    out = chain_of(mech, rows).invoke("Which drug?")
    assert (out.answer, out.answer_source, out.epsilon) == ("Aspirin", "documents", 40.0)


def test_a_refused_record_abstains_instead_of_failing_the_query() -> None:
    rows = [*AGREEING[:5], ("r5", "u5", "Forbidden: the drug is aspirin.")]
    mech = DPAnswerVote(LangChainTextModel(FilteredChat()), m=6, k=1, epsilon=40.0, delta=1e-4)
    assert mech.keys("Which drug?", chain_docs(rows), rng=0) == ["aspirin"] * 5
    assert chain_of(mech, rows).invoke("Which drug?").answer == "Aspirin"


def chain_docs(rows: list[Any]) -> list[ScoredDocument]:
    return [ScoredDocument(i, t, 0.9, unit=u) for i, u, t in rows]


def test_every_output_form_says_where_the_answer_came_from() -> None:
    mech = DPAnswerVote(LangChainTextModel(ReaderChat()), m=6, k=1, epsilon=40.0, delta=1e-4)
    chain = chain_of(mech, AGREEING)
    out = chain.invoke("Which drug?")
    assert out.answer_source == out.details["answer_source"] == "documents"
    whole = chain.model_copy(update={"output": "dict"}).invoke({"question": "Which drug?"})
    assert whole["answer_source"] == "documents"
    chunks = list(chain.stream("Which drug?"))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert (total.answer, total.answer_source) == ("Aspirin", "documents")
    assert chain.pick("answer_source").invoke("Which drug?") == "documents"


def test_model_alone_answers_say_so() -> None:
    model = LangChainTextModel(FakeListChatModel(responses=["Paris."] * 4))
    out = chain_of(NonRAG(model), AGREEING).invoke("Capital of France?")
    assert out.answer_source == "model"
    assert shown_text(out.answer, out.details) == "Paris. (from the model alone, not the records)"
    # a DP answer that released nothing, answered by the public fallback
    silent = DPAnswerVote(model, m=6, k=1, epsilon=0.01, delta=1e-4)
    out = chain_of(silent, AGREEING, public_fallback=True).invoke("Capital of France?")
    assert (out.answer, out.answer_source, out.details["public_fallback"]) == (
        "Paris.",
        "model",
        True,
    )
