"""Speculative voting on the OpenAI-compatible path releases what step-by-step voting releases.

:class:`~dprag_core.models.openai_compat.OpenAICompatSession` buffers each row's
own greedy continuation (``lookahead_tokens`` per refill, a request per row) and sends only
the rows whose buffer the released token did not match. The claim tested here:
for every token-voting mechanism (VoteRAG, DPVote, DPSparseVote with both
selections, MuRAG over the pure-DP one; token and word units) and fixed seeds, the
transcript (the tokens appended to the voters' rows, the streamed chunks, the
answer, its details: stop reason, private-token counts; the guarantee charged;
and every vote the mechanism read: each ``greedy()`` and ``lookahead()`` result)
is identical to the step-by-step session's (``lookahead_tokens=1``: every row
sent at every token), with voters that disagree, end ids
inside a buffer and a budget that runs out with tokens still buffered; and that
agreeing voters cost at most one fill per 4 released tokens.

The servers are deterministic doubles (tests/server_doubles.py): a scripted one,
and one that runs a tiny transformers model; the real llama.cpp server is
tests/models/test_llama_server.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from server_doubles import ModelServer, Recorded, ScriptedServer, served

from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import DPSparseVote, DPVote, VoteRAG
from dprag_core.algorithms.base import StreamingMechanism
from dprag_core.algorithms.murag import MuRAG
from dprag_core.answers import DPAnswer
from dprag_core.models.envelope import keep_last
from dprag_core.retrieval import ScoredDocument
from dprag_core.stop_reasons import BUDGET, EOS

SCRIPTS = {
    "aspirin": " aspirin twice a day",
    "salbutamol": " salbutamol",
    "": " a doctor",  # the public prompt and any other row
}
QUESTION = "Which treatment did Alice Martin receive?"
M = 8


def _docs(kinds: list[str]) -> list[ScoredDocument]:
    texts = {
        "aspirin": "Alice Martin was treated with aspirin.",
        "salbutamol": "Bob Durand was prescribed salbutamol.",
    }
    return [
        ScoredDocument(id=f"d{i}", text=texts[k], score=0.9 - i / 100) for i, k in enumerate(kinds)
    ]


MIXED = _docs(["aspirin"] * 6 + ["salbutamol"] * 2)
AGREE = _docs(["aspirin"] * M)

Build = Callable[[Any], StreamingMechanism]
DP = {"epsilon": 800.0, "delta": 1e-4, "epsilon_token": 40.0}
WORDS = {"unit": "word", "max_word_tokens": 6}
MECHANISMS: dict[str, Build] = {
    "VoteRAG": lambda m: VoteRAG(m, m=M, k=1, max_new_tokens=12),
    "VoteRAG-words": lambda m: VoteRAG(m, m=M, k=1, max_new_tokens=12, **WORDS),
    "DPVote": lambda m: DPVote(m, m=M, k=1, max_new_tokens=12, **DP),
    "DPVote-words": lambda m: DPVote(m, m=M, k=1, max_new_tokens=12, **DP, **WORDS),
    "DPVote-budget": lambda m: DPVote(  # 3 private tokens, then the budget stops it
        m, m=M, k=1, max_new_tokens=12, epsilon=60.0, delta=1e-4, epsilon_token=20.0
    ),
    "DPSparseVote-LD": lambda m: DPSparseVote(m, m=M, k=1, max_new_tokens=12, **DP),
    "DPSparseVote-LD-words": lambda m: DPSparseVote(
        m, m=M, k=1, max_new_tokens=12, **DP, **WORDS
    ),
    "DPSparseVote-EM": lambda m: DPSparseVote(
        m, m=M, k=1, max_new_tokens=12, epsilon=40.0, delta=0.0, epsilon_token=4.0,
        selection="exponential",
    ),
    "MuRAG-DPSparseVote-EM": lambda m: MuRAG(  # MuRAG wraps pure epsilon-DP inners only
        DPSparseVote(
            m, m=M, k=1, max_new_tokens=12, epsilon=400.0, delta=0.0, epsilon_token=20.0,
            selection="exponential",
        ),
        ledger=InMemoryLedger(budget_per_unit=800.0), tau=0.0, epsilon_query=400.0,
    ),
}  # fmt: skip


def _eos(tokenizer: Any) -> int:
    return int(tokenizer.eos_token_id)


def transcript(
    server: Any, tokenizer: Any, name: str, docs: list[ScoredDocument], seed: int, depth: int
) -> tuple[Any, ...]:
    """Everything a run releases or records, on a model with lookahead depth ``depth``."""
    model = Recorded(served(server, tokenizer, lookahead_tokens=depth))
    *chunks, answer = MECHANISMS[name](model).stream(QUESTION, docs, rng=seed)
    assert isinstance(answer, DPAnswer)
    details = {k: v for k, v in answer.details.items() if k != "query_id"}  # fresh per query
    return model.appended, chunks, answer.text, details, answer.guarantee, model.seen


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_speculative_transcripts_equal_step_by_step(name: str, tiny_tokenizer: Any) -> None:
    server = ScriptedServer(tiny_tokenizer, SCRIPTS, eos=_eos(tiny_tokenizer))
    stops = set()
    for docs in (MIXED, AGREE):
        for seed in (0, 1):
            step = transcript(server, tiny_tokenizer, name, docs, seed, depth=1)
            for depth in (3, 8):
                assert transcript(server, tiny_tokenizer, name, docs, seed, depth) == step
            stops.add(step[3]["stop_reason"])
            assert step[2]  # something was released
    assert (BUDGET if name == "DPVote-budget" else EOS) in stops


@pytest.mark.parametrize("name", ["VoteRAG", "DPSparseVote-LD-words", "DPVote"])
def test_speculative_transcripts_equal_step_by_step_on_a_real_model(
    name: str, tiny_tokenizer: Any, tiny_hf_models: dict[str, Any]
) -> None:
    """A tiny random GPT-2 served greedily: voters that disagree at almost every token."""
    server = ModelServer(tiny_hf_models["gpt2"], eos=_eos(tiny_tokenizer))
    for seed in (0, 1):
        step = transcript(server, tiny_tokenizer, name, MIXED, seed, depth=1)
        assert transcript(server, tiny_tokenizer, name, MIXED, seed, depth=4) == step
        assert len(step[0][0]) >= 6  # tokens were released


def test_agreeing_rows_send_nothing(tiny_tokenizer: Any) -> None:
    """Voters that agree: at most one fill (a request per row) per 4 released tokens
    (depth 8); only rows that need tokens are sent; bytes per released token do not grow
    with the answer."""
    long = {"": " aspirin twice a day, then once a day for a week"}  # 31 tokens
    server = ScriptedServer(tiny_tokenizer, long, eos=_eos(tiny_tokenizer))
    model = served(server, tiny_tokenizer, lookahead_tokens=8)
    *_, answer = VoteRAG(model, m=M, k=1, max_new_tokens=40).stream(QUESTION, AGREE, rng=0)
    assert isinstance(answer, DPAnswer)
    released = answer.details["tokens_generated"]
    assert released >= 16 and answer.details["stop_reason"] == EOS
    assert len(server.requests) <= M * released / 4
    assert {len(r["prompt"]) for r in server.requests} == {1}  # one row per request
    assert {r["max_tokens"] for r in server.requests} == {8}
    step_server = ScriptedServer(tiny_tokenizer, long, eos=_eos(tiny_tokenizer))
    step_model = served(step_server, tiny_tokenizer, lookahead_tokens=1)
    VoteRAG(step_model, m=M, k=1, max_new_tokens=40).answer(QUESTION, AGREE, rng=0)
    assert len(step_server.requests) == M * (released + 1)  # every row per token, and the end
    assert server.sent_bytes * 4 < step_server.sent_bytes


def test_disagreeing_rows_are_refilled_alone(tiny_tokenizer: Any) -> None:
    server = ScriptedServer(tiny_tokenizer, SCRIPTS, eos=_eos(tiny_tokenizer))
    model = served(server, tiny_tokenizer, lookahead_tokens=8)
    session = model.prefill(["Context: aspirin\nAnswer:", "Context: salbutamol\nAnswer:"])
    first = session.greedy()
    assert first[0] != first[1] and len(server.requests) == 2  # a request per row
    session.step(int(first[0]))  # row 0's token: row 1 drops its buffer
    session.greedy()
    (row_1,) = keep_last(model.prompt_rows(["Context: salbutamol\nAnswer:"]), model.prompt_width)
    assert len(server.requests) == 3 and server.requests[2]["prompt"] == [[*row_1, int(first[0])]]
    ahead = session.lookahead(3)  # row 0 buffered 7 more, row 1 just refilled: no request
    assert ahead.shape == (2, 3) and len(server.requests) == 3


def test_lookahead_tokens_is_checked(tiny_tokenizer: Any) -> None:
    server = ScriptedServer(tiny_tokenizer, SCRIPTS, eos=_eos(tiny_tokenizer))
    for bad in (0, -1, 2.5, True):
        with pytest.raises((ValueError, TypeError), match="lookahead_tokens must be an integer"):
            served(server, tiny_tokenizer, lookahead_tokens=bad)


def test_rows_the_server_ends_on_its_own_ids_read_the_same_at_every_depth(
    tiny_tokenizer: Any,
) -> None:
    """The server stops rows at ``<|im_end|>``, which the client's end set lacks (a server
    whose end-of-generation set is larger): every depth reads an end after it."""
    im_end = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end not in served(ScriptedServer(tiny_tokenizer, SCRIPTS, eos=0), tiny_tokenizer,
                                lookahead_tokens=1).eos_token_ids  # fmt: skip
    server = ScriptedServer(tiny_tokenizer, SCRIPTS, eos=im_end)
    for name in ("VoteRAG", "DPVote-words"):
        step = transcript(server, tiny_tokenizer, name, MIXED, 0, depth=1)
        assert transcript(server, tiny_tokenizer, name, MIXED, 0, depth=8) == step
        assert step[3]["stop_reason"] == EOS
