"""DPQueryEngine with a word-level DPVote (``unit="word"``): the voters' words come out
whole, and the canary a single voter proposes reaches no response or side channel."""

from __future__ import annotations

from typing import Any

import pytest
from fake_token_model import FakeTokenModel
from li_helpers import CANARY, QUESTION, leaks
from toy_mechanisms import word_dpvote

from dprag_core.accounting.accountant import InMemoryCorpusAccountant
from dprag_core.budget import Budget
from llamaindex_dprag import DPQueryEngine


@pytest.mark.parametrize("streaming", [False, True], ids=["query", "stream"])
def test_word_level_dpvote_engine(index: Any, channels: Any, streaming: bool) -> None:
    # The voter holding the canary's record proposes the canary as its next word (the
    # worst case: a model quoting its context); the eleven others agree on the answer.
    model = FakeTokenModel([(CANARY, f"{CANARY} daily"), ("Context", "Nobody knows it")])
    mechanism = word_dpvote(model, m=12)  # the canary fits in one word (24 tokens)
    acc = InMemoryCorpusAccountant(Budget(100.0, 0.5))
    engine = DPQueryEngine.from_index(
        index,
        mechanism=mechanism,
        budget=acc,
        score_range=(-1.0, 1.0),
        streaming=streaming,
        rng=0,
    )
    response = engine.query(QUESTION)
    text = "".join(response.response_gen) if streaming else str(response)
    assert text == "Nobody knows it"
    assert response.metadata["details"]["private_words"] == 4  # three words, then the end
    assert acc.queries == 1
    assert any(CANARY in p for p in model.prompts[0])  # a voter did see (and propose) it
    assert leaks([text, response, response.metadata, repr(engine)]) == []
    assert leaks(channels.everything()) == []
    assert any("DPQueryEngine" in str(s[1]) for s in channels.spans.seen)
