"""The public envelope (issue 36 cases 2 and 4): what a model endpoint receives depends on
public numbers and the released answer only.

Case 2, the width: a server refuses a prompt over its context (HTTP 400, llama.cpp
and vLLM), so a long document once made a query fail that its neighbour
answered. Now every server prompt keeps its last ``prompt_width`` tokens, as in
process; a context not above the width, or an answer that would not fit, is
refused when the model or the mechanism is built. Here a server double with
llama.cpp's context rule (tests/server_doubles.py) gets the same requests
(count, rows, ``max_tokens``; every row within the width plus the answer so far)
from a corpus D and from D + x, x a ~3800-token document; the mutation (no cut)
sends x's row whole in D + x only: the server refuses it, and x's row abstains.

Case 4, the schedule: with ``unit="word"`` the session reused buffered tokens
across decisions, so two corpora releasing the same answer sent different
requests (6 against 2). With ``lookahead_tokens=1`` (the default) every decision
sends every row, each in a request of its own: the schedules are equal for token and
word units; speculative
depths still differ (docs/servers.md says what a server operator sees then).

The real llama.cpp server is tests/models/test_llama_server.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_doubles import ScriptedServer, served

import dprag_core.models.openai_compat as openai_compat
from dprag_core.algorithms import DPVote, VoteRAG
from dprag_core.answers import DPAnswer
from dprag_core.models.endpoint import CompletionsEndpoint, EndpointError
from dprag_core.models.hf import HFTextModel, HFTokenModel
from dprag_core.models.openai_compat import OpenAICompatModel
from dprag_core.retrieval import ScoredDocument

SCRIPTS = {"aspirin": " aspirin twice a day", "salbutamol": " salbutamol", "": " a doctor"}
QUESTION = "Which treatment did Alice Martin receive?"
M = 8
TEXTS = {
    "aspirin": "Alice Martin was treated with aspirin.",
    "salbutamol": "Bob Durand was prescribed salbutamol.",
    # x: ~3800 tokens, the nearest document; its last words still name the treatment
    "long": "Alice Martin, a long record. " * 500 + "Alice Martin was treated with aspirin.",
}
DP = {"epsilon": 800.0, "delta": 1e-4, "epsilon_token": 40.0}
WORDS = {"unit": "word", "max_word_tokens": 6}


def _docs(kinds: list[str]) -> list[ScoredDocument]:
    return [
        ScoredDocument(id=f"d{i}", text=TEXTS[k], score=0.9 - i / 100) for i, k in enumerate(kinds)
    ]


AGREE = _docs(["aspirin"] * M)
MIXED = _docs(["aspirin"] * 6 + ["salbutamol"] * 2)
WITH_X = _docs(["long"] + ["aspirin"] * 5 + ["salbutamol"] * 2)  # x substitutes one voter


def _server(tokenizer: Any, n_ctx: int = 4096) -> ScriptedServer:
    return ScriptedServer(tokenizer, SCRIPTS, eos=int(tokenizer.eos_token_id), n_ctx=n_ctx)


def _run(
    tokenizer: Any, mechanism: Any, docs: list[ScoredDocument], *, depth: int = 1, **kw: Any
) -> tuple[str, list[tuple[int, int]], ScriptedServer]:
    """The answer, the schedule (rows and max_tokens of each request) and the server."""
    server = _server(tokenizer, **kw)
    model = served(server, tokenizer, lookahead_tokens=depth, prompt_width=96)
    answer = mechanism(model).answer(QUESTION, docs, rng=0)
    assert isinstance(answer, DPAnswer)
    schedule = [(len(r["prompt"]), r["max_tokens"]) for r in server.requests]
    return answer.text, schedule, server


MECHANISMS = {
    "VoteRAG": lambda m: VoteRAG(m, m=M, k=1, max_new_tokens=12),
    "VoteRAG-words": lambda m: VoteRAG(m, m=M, k=1, max_new_tokens=12, **WORDS),
    "DPVote-words": lambda m: DPVote(m, m=M, k=1, max_new_tokens=12, **DP, **WORDS),
}


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_the_public_schedule_is_the_same_for_neighbours_releasing_one_answer(
    name: str, tiny_tokenizer: Any
) -> None:
    """Every decision: every row, a request each, the decision's tokens (1 or a word's n)."""
    agree, mixed = (_run(tiny_tokenizer, MECHANISMS[name], docs) for docs in (AGREE, MIXED))
    assert agree[0] == mixed[0] and agree[0].strip()  # one answer released by both
    assert agree[1] == mixed[1]
    assert {rows for rows, _ in agree[1]} == {1} and len(agree[1]) % M == 0


def test_speculation_sends_what_the_voters_hold(tiny_tokenizer: Any) -> None:
    """The setting docs/servers.md says is not public: at depth 8 the same answer costs
    a different schedule on the two corpora (the rows that disagree are refilled)."""
    build = MECHANISMS["VoteRAG-words"]
    agree, mixed = (_run(tiny_tokenizer, build, docs, depth=8) for docs in (AGREE, MIXED))
    assert agree[0] == mixed[0] and agree[1] != mixed[1]


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_a_long_document_changes_nothing_beyond_the_width(name: str, tiny_tokenizer: Any) -> None:
    """A server whose context (160) holds the width (96) and the answer, not x: D and D + x
    send the same requests, each row at most the width plus the answer so far."""
    assert len(tiny_tokenizer.encode(TEXTS["long"])) > 3000
    runs = [_run(tiny_tokenizer, MECHANISMS[name], docs, n_ctx=160) for docs in (MIXED, WITH_X)]
    (text, schedule, server), (text_x, schedule_x, server_x) = runs
    assert text == text_x and schedule == schedule_x
    for each in (server, server_x):
        for request in each.requests:
            assert max(len(row) for row in request["prompt"]) + request["max_tokens"] <= 160


def test_without_the_cut_the_long_document_reaches_the_server_alone(
    tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation (prompts sent whole): D + x sends x's row over the server's context
    (its length reaches the server, which refuses it: the row abstains), D does not."""
    monkeypatch.setattr(openai_compat, "keep_last", lambda rows, width: [list(r) for r in rows])
    build = MECHANISMS["VoteRAG"]
    runs = [_run(tiny_tokenizer, build, docs, n_ctx=160) for docs in (MIXED, WITH_X)]
    widest = [max(len(row) for r in server.requests for row in r["prompt"]) for *_, server in runs]
    assert runs[0][0] and runs[1][0]  # both answer
    assert widest[0] < 160 <= widest[1]


def test_generate_cuts_its_prompts_too(tiny_tokenizer: Any) -> None:
    server = _server(tiny_tokenizer, n_ctx=160)
    model = served(server, tiny_tokenizer, lookahead_tokens=1, prompt_width=96)
    prompt = f"Context: {TEXTS['long']}\nAnswer:"
    assert model.generate([prompt], max_new_tokens=16) == [" aspirin twice a day"]
    assert server.requests[0]["prompt"] == [model.prompt_ids(prompt)[-96:]]
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 64\]"):
        model.generate(["short"], max_new_tokens=65)  # refused for every prompt alike


def test_the_context_is_read_from_the_server_and_a_small_one_is_refused(
    tiny_tokenizer: Any,
) -> None:
    model = served(_server(tiny_tokenizer, n_ctx=300), tiny_tokenizer, lookahead_tokens=1)
    assert (model.context_length, model.prompt_width, model.answer_room) == (300, 150, 150)
    with pytest.raises(ValueError, match=r"prompt_width must be in \[1, 63\]"):
        served(_server(tiny_tokenizer, n_ctx=64), tiny_tokenizer, lookahead_tokens=1,
               prompt_width=64)  # fmt: skip
    small = served(_server(tiny_tokenizer, n_ctx=64), tiny_tokenizer, lookahead_tokens=1,
                   prompt_width=60)  # fmt: skip
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 4\]"):
        VoteRAG(small, m=M, k=1, max_new_tokens=12)  # when built, before any query
    VoteRAG(small, m=M, k=1, max_new_tokens=4)


def _models_list(body: Any) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "GET" and request.url.path == "/v1/models"
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handler)


def test_vllm_states_its_context_in_the_model_list(tiny_tokenizer: Any) -> None:
    listed = {"data": [{"id": "other", "max_model_len": 99}, {"id": "m", "max_model_len": 2048}]}
    endpoint = CompletionsEndpoint(
        "http://server.test/v1", model="m", server="vllm", transport=_models_list(listed)
    )
    assert endpoint.context_length() == 2048
    model = OpenAICompatModel(endpoint, tiny_tokenizer, check_tokenizer=False)
    assert (model.context_length, model.prompt_width) == (2048, 256)


@pytest.mark.parametrize(
    ("server", "body"), [("vllm", {"data": []}), ("openai", None)], ids=["unstated", "openai"]
)
def test_a_context_that_cannot_be_read_must_be_declared(
    tiny_tokenizer: Any, server: Any, body: Any
) -> None:
    endpoint = CompletionsEndpoint(
        "http://server.test/v1", model="m", server=server, transport=_models_list(body)
    )
    with pytest.raises(EndpointError, match="pass context_length="):
        OpenAICompatModel(endpoint, tiny_tokenizer, check_tokenizer=False)
    declared = OpenAICompatModel(
        endpoint, tiny_tokenizer, check_tokenizer=False, context_length=1024
    )  # the user's word
    assert declared.answer_room == 1024 - 256


def test_in_process_the_room_is_public_too(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    """GPT-2's positions are learned (512 here): a row past them would fail, and only a
    long row gets there. With prompt_width 500 the room is 12 tokens for every row: a
    mechanism asking more is refused when built, a 13th token refused for short and long
    prompts alike."""
    model = HFTokenModel(tiny_hf_models["gpt2"], tiny_tokenizer, prompt_width=500)
    assert (model.context_length, model.answer_room) == (512, 12)
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 12\]"):
        DPVote(model, m=2, k=1, max_new_tokens=13, **DP)
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        HFTextModel.on(model).generate(["short"], max_new_tokens=13)
    for prompt in ("short", TEXTS["long"]):
        session = model.prefill([prompt])
        session.extend([5] * 12)
        with pytest.raises(ValueError, match="at most 12 tokens"):
            session.step(5)
        with pytest.raises(ValueError, match="at most 12 tokens"):
            session.lookahead(2)
