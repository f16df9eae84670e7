"""DPRAGChain with a word-level DPVote (``unit="word"``): the voters' words come out
whole, and the canary a single voter proposes reaches no output, event or callback."""

from __future__ import annotations

from fake_token_model import FakeTokenModel
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, SECRET, RecordingHandler, dump
from toy_mechanisms import word_dpvote

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from langchain_dprag import DPRAGChain


async def test_word_level_dpvote_chain(store: InMemoryVectorStore) -> None:
    # The voter holding the canary's record proposes the canary as its next word (the
    # worst case: a model quoting its context); the ten others agree on the answer.
    model = FakeTokenModel([(SECRET, f"{SECRET} is it"), ("Context", "Nobody knows it")])
    mechanism = word_dpvote(model, m=11)  # the canary fits in one word (24 tokens)
    acc = InMemoryCorpusAccountant(Budget(1e3, 0.5))
    chain = DPRAGChain(
        vectorstore=store, mechanism=mechanism, unit_key="patient", accountant=acc, rng=0
    )
    handler = RecordingHandler()
    config = {"callbacks": [handler]}
    out = chain.invoke(QUESTION, config)
    assert out.answer == "Nobody knows it"
    assert out.details["unit"] == "word" and out.details["private_words"] == 4  # 3 words, end
    chunks = list(chain.stream(QUESTION, config))
    events = [e async for e in chain.astream_events(QUESTION, config, version="v2")]
    assert acc.queries == 3
    # the canary was in a voter's prompt, and that voter proposed it
    assert any(SECRET in p for p in model.prompts[0])
    seen = dump([out.model_dump(), *chunks]) + dump(events) + handler.text()
    assert "Nobody knows it" in seen  # the detector reads the channels it searches
    assert SECRET not in seen
