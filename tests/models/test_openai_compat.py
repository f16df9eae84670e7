"""The completions client without a server: request shape, parsing, retries, refusals, leaks.

The HTTP exchange is an ``httpx.MockTransport`` here (request bodies are
inspected, responses scripted); the model's behaviour against a real server
(llama.cpp's) is tests/models/test_llama_server.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from private_frames import reachable_text

from dprag_core.algorithms import DPICL, DPKSA, DPSparseVote
from dprag_core.datastore.keys import token_distribution_keys
from dprag_core.eval.workbench import reader_path
from dprag_core.models import LogprobModel, TextModel, TokenModel
from dprag_core.models.endpoint import CompletionsEndpoint, EndpointError, parse_completions
from dprag_core.models.openai_compat import TOKENIZER_PROBE, OpenAICompatModel

CANARY = "CANARY-7f3a9c-private-record"
CONTEXT = 4096  # the context the tests declare (the mock handlers answer no /props)
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(reader_path()))


def _llama_cpp_reply(request: httpx.Request, token: int = 5) -> httpx.Response:
    """llama.cpp's native /completion answer: every row's ``max_tokens`` tokens are ``token``."""
    body = json.loads(request.content)
    results = [
        {"index": i, "tokens": [token] * body["max_tokens"], "stop_type": "limit"}
        for i in range(len(body["prompt"]))
    ]
    return httpx.Response(200, json=results)


def _endpoint(handler: Handler, **kw: Any) -> CompletionsEndpoint:
    return CompletionsEndpoint(
        "http://server.test/v1", model="reader", transport=httpx.MockTransport(handler), **kw
    )


def _model(tokenizer: Any, handler: Handler, **kw: Any) -> OpenAICompatModel:
    """The step-by-step protocol (lookahead_tokens=1: one request per step, as before
    speculative voting; tests/models/test_speculative.py covers the buffers)."""
    return OpenAICompatModel(
        _endpoint(handler, **kw),
        tokenizer,
        check_tokenizer=False,
        lookahead_tokens=1,
        context_length=CONTEXT,
    )


def test_each_step_sends_every_row_once_in_a_token_id_request_of_its_own(
    tokenizer: Any,
) -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        assert request.url.path == "/completion"  # llama.cpp's native endpoint: every id
        return _llama_cpp_reply(request)

    model = _model(tokenizer, handler)
    session = model.prefill(["first prompt", "second, longer prompt"])
    assert sent == []  # nothing is sent before the first greedy()
    assert session.greedy().tolist() == [5, 5]
    assert session.greedy().tolist() == [5, 5] and len(sent) == 2  # cached per step
    session.step(7)
    session.greedy()
    assert len(sent) == 4 and all(len(body["prompt"]) == 1 for body in sent)
    rows = [model.prompt_ids("first prompt"), model.prompt_ids("second, longer prompt")]
    first = sorted(row for body in sent[:2] for row in body["prompt"])  # sent concurrently
    second = sorted(row for body in sent[2:] for row in body["prompt"])
    assert first == sorted(rows) and second == sorted([*row, 7] for row in rows)
    assert {k: sent[3][k] for k in ("max_tokens", "temperature", "cache_prompt", "model")} == {
        "max_tokens": 1,
        "temperature": 0,
        "cache_prompt": True,
        "model": "reader",
    }


def test_vllm_token_ids_and_headers(tokenizer: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["return_tokens_as_token_ids"] is True and "cache_prompt" not in body
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["x-tenant"] == "t1"
        lp = {"tokens": ["token_id:9", "token_id:0"]}
        return httpx.Response(
            200, json={"choices": [{"index": 0, "finish_reason": "stop", "logprobs": lp}]}
        )

    model = _model(tokenizer, handler, server="vllm", api_key="sk-test", headers={"X-Tenant": "t1"})
    assert model.endpoint.complete([[1, 2]], max_tokens=4)[0].token_ids == (9, 0)
    assert model.generate(["q"], max_new_tokens=4) == [model.decode([9])]  # cut at EOS 0
    assert "sk-test" not in repr(model) and "t1" not in repr(model)


def test_protocols_and_refusals(tokenizer: Any) -> None:
    model = _model(tokenizer, _llama_cpp_reply)
    assert isinstance(model, TokenModel) and isinstance(model, TextModel)
    assert not isinstance(model, LogprobModel)
    DPSparseVote(model, m=2, k=1, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=2)
    DPKSA(model, epsilon=5.0, delta=1e-4)
    with pytest.raises(TypeError, match="LogprobModel"):
        DPICL(model, epsilon=5.0, delta=1e-4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LogprobModel"):
        token_distribution_keys(model, ["a prompt"])  # type: ignore[arg-type]


def test_a_bare_eos_stop_is_eos_and_bad_ids_are_errors(tokenizer: Any) -> None:
    def eos(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"index": 0, "tokens": [], "stop_type": "eos"})

    assert _model(tokenizer, eos).prefill(["q"]).greedy().tolist() == [0]
    out_of_range = _model(tokenizer, lambda r: _llama_cpp_reply(r, token=len(tokenizer)))
    with pytest.raises(EndpointError, match="no token id in"):
        out_of_range.generate(["q"], max_new_tokens=2)
    assert out_of_range.prefill(["q"]).greedy().tolist() == [0]  # a session's row abstains
    with pytest.raises(EndpointError, match="expected 2 choices"):
        parse_completions({"choices": []}, 2)
    with pytest.raises(EndpointError, match="no token ids"):
        parse_completions({"choices": [{"index": 0, "logprobs": {"tokens": ["hello"]}}]}, 1)


@pytest.mark.parametrize(("status", "calls"), [(503, 3), (429, 3), (400, 1), (404, 1)])
def test_retries_transient_failures_only(tokenizer: Any, status: int, calls: int) -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(1)
        return httpx.Response(status, text=f"error echoing {CANARY}")

    model = _model(tokenizer, handler, retries=2, backoff=0.0)
    with pytest.raises(EndpointError, match=f"HTTP {status}"):
        model.generate([f"Context: {CANARY}"], max_new_tokens=1)
    assert len(seen) == calls


def test_a_retry_resends_the_same_request(tokenizer: Any) -> None:
    bodies: list[bytes] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(503) if len(bodies) == 1 else _llama_cpp_reply(request)

    assert _model(tokenizer, flaky, backoff=0.0).generate(["q"], max_new_tokens=1) == [
        tokenizer.decode([5])
    ]
    assert bodies[0] == bodies[1]  # the same rows: nothing replayed, nothing skipped


def _failing_on_canary(tokenizer: Any, failure: str, bodies: list[dict[str, Any]]) -> Handler:
    """A llama.cpp double that records each request's body in ``bodies`` and fails
    (``failure``: refuse, timeout or 503) every request whose one prompt holds CANARY."""

    def filtered(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if CANARY in tokenizer.decode(body["prompt"][0]):
            if failure == "timeout":
                raise httpx.ReadTimeout("timed out", request=request)
            return httpx.Response(400 if failure == "refuse" else 503, text="refused")
        return _llama_cpp_reply(request)

    return filtered


@pytest.mark.parametrize("failure", ["refuse", "timeout", "503"])
def test_a_session_row_that_fails_abstains_and_nothing_is_sent_again(
    tokenizer: Any, failure: str
) -> None:
    """A row the server refuses, times out on or fails (503) reads an end from there on;
    the other rows answer; each decision sends every row once, whatever any of them met."""
    bodies: list[dict[str, Any]] = []
    filtered = _failing_on_canary(tokenizer, failure, bodies)

    session = _model(tokenizer, filtered, retries=2, backoff=0.0).prefill(
        ["Context: a", f"Context: {CANARY}", "Context: b"]
    )
    assert session.greedy().tolist() == [5, 0, 5]
    session.step(5)
    assert session.lookahead(2).tolist() == [[5, 5], [0, 0], [5, 5]]
    assert len(bodies) == 6 and all(len(b["prompt"]) == 1 for b in bodies)


@pytest.mark.parametrize("failure", ["refuse", "timeout", "503"])
def test_generate_each_is_one_request_per_prompt_each_sent_once(
    tokenizer: Any, failure: str
) -> None:
    """A prompt the server refuses (HTTP 400), times out on or fails (503) abstains; the
    others answer; every prompt is one request, sent once, whatever any of them met."""
    bodies: list[dict[str, Any]] = []
    filtered = _failing_on_canary(tokenizer, failure, bodies)

    model = _model(tokenizer, filtered, retries=2, backoff=0.0)
    prompts = ["Context: a", f"Context: {CANARY}", "Context: b"]
    out = model.generate_each(prompts, max_new_tokens=2)
    assert out[1] is None and isinstance(out[0], str) and out[0] == out[2]
    assert len(bodies) == 3 and all(len(b["prompt"]) == 1 for b in bodies)


def test_errors_carry_no_private_text(tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(
            f"connection reset while sending {request.content!r}", request=request
        )

    model = _model(tokenizer, broken, retries=1, backoff=0.0)
    caplog.set_level(logging.DEBUG)
    assert model.prefill([f"Context: {CANARY}"]).greedy().tolist() == [0]  # abstains
    with pytest.raises(EndpointError) as info:
        model.endpoint.complete([model.prompt_ids(f"Context: {CANARY}")], max_tokens=1)
    assert str(info.value) == "completions request failed with ReadError"
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert CANARY not in reachable_text(info.value)
    assert CANARY not in caplog.text


def test_tokenizer_check(tokenizer: Any) -> None:
    local = tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)

    def served(ids: list[int]) -> Handler:
        def handler(request: httpx.Request) -> httpx.Response:
            assert request.url.path == "/tokenize"
            return httpx.Response(200, json={"tokens": ids})

        return handler

    OpenAICompatModel(_endpoint(served(local)), tokenizer, context_length=CONTEXT)
    with pytest.raises(ValueError, match="same checkpoint"):
        OpenAICompatModel(_endpoint(served(local[:-1])), tokenizer, context_length=CONTEXT)
    # no /tokenize (or an error, a stall): refused unless the user says so
    with pytest.raises(EndpointError, match="check_tokenizer=False"):
        OpenAICompatModel(_endpoint(lambda r: httpx.Response(404)), tokenizer)
    OpenAICompatModel(
        _endpoint(lambda r: httpx.Response(404)),
        tokenizer,
        check_tokenizer=False,
        context_length=CONTEXT,
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"base_url": "server:8080"}, ValueError, "base_url must start with"),
        ({"model": ""}, ValueError, "model must be a non-empty str"),
        ({"server": "tgi"}, ValueError, "server must be one of"),
        ({"retries": -1}, ValueError, "retries must be an int >= 0"),
        ({"timeout": 0}, ValueError, "timeout must be a finite number > 0"),
        ({"backoff": -1.0}, ValueError, "backoff must be a finite number >= 0"),
        ({"max_connections": 0}, ValueError, "max_connections must be"),
        ({"api_key": ""}, TypeError, "api_key must be a non-empty str"),
        ({"verify": 1}, TypeError, "verify must be True, False or a CA bundle path"),
    ],
)
def test_bad_endpoint_settings(kwargs: dict[str, Any], error: type, match: str) -> None:
    args: dict[str, Any] = {"base_url": "http://h/v1", "model": "m", **kwargs}
    with pytest.raises(error, match=match):
        CompletionsEndpoint(args.pop("base_url"), **args)


def test_bad_prompts_and_tokens(tokenizer: Any) -> None:
    model = _model(tokenizer, _llama_cpp_reply)
    with pytest.raises(TypeError, match="prompts must be a sequence of strings"):
        model.prefill("one string")
    with pytest.raises(ValueError, match="at least one prompt"):
        model.prefill([])
    with pytest.raises(ValueError, match="token must be in"):
        model.prefill(["q"]).step(-1)
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        model.generate(["q"], max_new_tokens=0)


def test_a_stopped_server_is_a_clean_error(tokenizer: Any) -> None:
    dead = OpenAICompatModel(  # nothing listens on the discard port
        CompletionsEndpoint("http://127.0.0.1:9/v1", model="reader", retries=0),
        tokenizer,
        check_tokenizer=False,  # (with the check, the model is refused when built)
        context_length=CONTEXT,
    )
    with pytest.raises(EndpointError, match="ConnectError") as info:
        dead.endpoint.complete([dead.prompt_ids(f"Context: {CANARY}")], max_tokens=1)
    assert CANARY not in reachable_text(info.value)
    assert dead.prefill([f"Context: {CANARY}"]).greedy().tolist() == [0]  # a row abstains


@pytest.mark.parametrize("eos", [["a"], [-1], [10**9], []])
def test_bad_eos_token_ids_are_refused_when_built(tokenizer: Any, eos: Any) -> None:
    with pytest.raises(ValueError, match="eos_token_ids must be token ids"):
        OpenAICompatModel(
            _endpoint(_llama_cpp_reply), tokenizer, eos_token_ids=eos, check_tokenizer=False
        )


def test_lookahead_is_one_request_of_n_tokens_per_row_and_keeps_the_rows(
    tokenizer: Any,
) -> None:
    """Rows that ended early read EOS from there on; nothing is appended to the rows."""
    sent: list[dict[str, Any]] = []
    replies = {
        "a": ([11, 12, 13, 14], "limit"),
        "b": ([11, 12], "eos"),  # a bare stop after two tokens
        "c": ([], "eos"),  # a bare stop at once: greedy() reads EOS there too
        "d": ([11, 0, 13], "eos"),  # EOS (id 0) returned, then (oddly) more: cut at the EOS
    }

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        n = body["max_tokens"]
        ((ids, reason),) = [r for p, r in replies.items() if body["prompt"] == [rows[p]]]
        stop = "limit" if len(ids) > n else reason
        return httpx.Response(200, json=[{"index": 0, "tokens": ids[:n], "stop_type": stop}])

    model = _model(tokenizer, handler)
    rows = {p: model.prompt_ids(p) for p in replies}
    assert min(model.eos_token_ids) == 0
    session = model.prefill(list(replies))
    table = session.lookahead(4)
    assert table.tolist() == [[11, 12, 13, 14], [11, 12, 0, 0], [0, 0, 0, 0], [11, 0, 0, 0]]
    assert table.dtype == np.intp
    assert len(sent) == 4 and {body["max_tokens"] for body in sent} == {4}
    seen: list[int] = []

    def stop(tokens: Any) -> bool:
        seen.append(tokens.shape[1])
        return bool(tokens.shape[1] == 2)

    assert session.lookahead(4, stop=stop).tolist() == [row[:2] for row in table.tolist()]
    assert seen == [1, 2]  # applied to the columns afterwards, as a stepping session would
    assert session.greedy().tolist() == table[:, 0].tolist()
    assert len(sent) == 4  # greedy() reads the buffered column 0: nothing more is sent


@pytest.mark.parametrize(
    ("ids", "reason"),
    [([5], "limit"), ([5, 6, 7, 8], "limit"), ([5, 10**9], "limit"), ([-1, 5], "eos")],
)
def test_lookahead_abstains_on_malformed_completions(
    tokenizer: Any, ids: list[int], reason: str
) -> None:
    """A row whose completion fails the check reads an end, never an id it returned."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"index": 0, "tokens": ids, "stop_type": reason})

    model = _model(tokenizer, handler)
    with pytest.raises(EndpointError, match=r"no token id in \[0, \d+\) \(expected 3 token ids"):
        model.generate(["q"], max_new_tokens=3)
    assert model.prefill(["q"]).lookahead(3).tolist() == [[0, 0, 0]]


def test_lookahead_checks_n_before_any_request_and_a_refused_row_abstains(
    tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[int] = []

    def refusing(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(400, text=f"error echoing {CANARY}")

    session = _model(tokenizer, refusing).prefill([f"Context: {CANARY}"])
    bad: list[Any] = [0, -1, True, 2.5]
    for n in bad:
        with pytest.raises((TypeError, ValueError), match="n must be an integer >= 1"):
            session.lookahead(n)
    assert sent == []  # refused before any request
    caplog.set_level(logging.DEBUG)
    assert session.lookahead(3).tolist() == [[0, 0, 0]] and len(sent) == 1
    assert CANARY not in caplog.text
