"""The server path's own checks, against a fault-injecting HTTP server on loopback.

A real socket server (``http.server`` in a thread) answers each path with what a
test scripts: malformed token ids on the text-generation path (DP-KSA's), a
``/tokenize`` that fails or stalls, and a recording HTTP proxy. Checked: every id
is refused clearly (out of range, negative, huge, extra tokens, JSON ``true``),
naming no id; a tokenizer that cannot be verified refuses the model unless
``check_tokenizer=False``; proxies in the environment are never used, an explicit
``proxy=`` is.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from private_frames import reachable_text

from dprag_core.eval.workbench import reader_path
from dprag_core.models.endpoint import CompletionsEndpoint, EndpointError
from dprag_core.models.openai_compat import TOKENIZER_PROBE, OpenAICompatModel

CANARY = "CANARY-5e81-private-record"
CONTEXT = 4096  # the context the tests declare (these servers answer no /props)
Reply = Callable[[str, dict[str, Any]], tuple[int, Any]]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(reader_path()))


@contextmanager
def http_server(reply: Reply) -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A loopback server: ``reply(path, body) -> (status, json)``; yields (URL, requests).

    A proxied request arrives with the absolute URL as its path (the test of a proxy).
    """
    seen: list[tuple[str, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            status, answer = reply(self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # requests hold private prompts
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a stalled handler does not hold the test up
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _tokens(ids: Any, stop: str = "limit") -> Reply:
    """A llama.cpp server whose every completion is ``ids`` (and /tokenize honest)."""

    def reply(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"index": 0, "tokens": ids, "stop_type": stop}

    return reply


def _model(url: str, tokenizer: Any, **kw: Any) -> OpenAICompatModel:
    endpoint = CompletionsEndpoint(f"{url}/v1", model="reader", retries=0, **kw)
    return OpenAICompatModel(
        endpoint, tokenizer, check_tokenizer=False, lookahead_tokens=4, context_length=CONTEXT
    )


@pytest.mark.parametrize(
    ("ids", "stop", "problem"),
    [
        ([10**6], "limit", "out of range"),  # past the vocabulary: once an empty string
        ([-3], "limit", "out of range"),  # negative: once a raw OverflowError
        ([2**70], "limit", "out of range"),  # huge
        ([True], "limit", "not an integer"),  # JSON true: once read as token 1
        ([7.0], "limit", "not an integer"),
        (["7"], "limit", "not an integer"),
        ([5, 6, 7, 8, 9], "limit", "too many"),  # more than max_tokens
        ([5, 6], "limit", "too few"),  # fewer, without a stop
    ],
)
def test_text_generation_checks_every_id(
    tokenizer: Any, ids: list[Any], stop: str, problem: str
) -> None:
    with http_server(_tokens(ids, stop)) as (url, seen):
        model = _model(url, tokenizer)
        with pytest.raises(EndpointError, match=problem) as generated:
            model.generate([f"Context: {CANARY}\nQuestion: who?"], max_new_tokens=4)
        # a session's row whose ids fail the check abstains: it reads an end, never the id
        session = model.prefill([f"Context: {CANARY}"])
        assert session.greedy().tolist() == [min(model.eos_token_ids)]
    assert seen and seen[0][0] == "/completion"
    info = generated  # the message names no id, and no cause or context
    assert "1000000" not in str(info.value) and CANARY not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_good_ids_pass(tokenizer: Any) -> None:
    with http_server(_tokens([5, 6, 0], "eos")) as (url, _):
        assert _model(url, tokenizer).generate(["q"], max_new_tokens=4) == [
            tokenizer.decode([5, 6])
        ]


def _tokenize(status: int, stall: float = 0.0, tokens: Any = None) -> Reply:
    def reply(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        assert path == "/tokenize" and body["content"] == TOKENIZER_PROBE
        time.sleep(stall)
        return status, {"tokens": tokens} if status == 200 else {"error": CANARY}

    return reply


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (_tokenize(500), "HTTP 500"),
        (_tokenize(404), "HTTP 404"),
        (_tokenize(200, stall=1.0), "ReadTimeout"),
        (_tokenize(200, tokens=[1, True]), "no list of token ids"),
    ],
    ids=["500", "404", "stall", "malformed"],
)
def test_a_tokenizer_that_cannot_be_verified_is_refused(
    tokenizer: Any, reply: Reply, reason: str
) -> None:
    with http_server(reply) as (url, _):
        endpoint = CompletionsEndpoint(f"{url}/v1", model="reader", retries=0, timeout=0.3)
        with pytest.raises(EndpointError, match=f"{reason}.*check_tokenizer=False") as info:
            OpenAICompatModel(endpoint, tokenizer)
        assert CANARY not in reachable_text(info.value)
        OpenAICompatModel(endpoint, tokenizer, check_tokenizer=False, context_length=CONTEXT)


def test_a_verified_tokenizer_passes_and_a_wrong_one_is_refused(tokenizer: Any) -> None:
    local = tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)
    with http_server(_tokenize(200, tokens=local)) as (url, _):
        OpenAICompatModel(
            CompletionsEndpoint(f"{url}/v1", model="reader"), tokenizer, context_length=CONTEXT
        )
    with (
        http_server(_tokenize(200, tokens=local[1:])) as (url, _),
        pytest.raises(ValueError, match="same checkpoint"),
    ):
        OpenAICompatModel(CompletionsEndpoint(f"{url}/v1", model="reader"), tokenizer)


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
def test_proxies_in_the_environment_are_not_used(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    with (
        http_server(_tokens([5], "eos")) as (url, served),
        http_server(_tokens([5], "eos")) as (proxy, proxied),
    ):
        monkeypatch.setenv(variable, proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        model = _model(url, tokenizer)
        model.prefill([f"Context: {CANARY}"]).greedy()
        assert proxied == [] and len(served) == 1
        assert model.endpoint._client.trust_env is False  # HTTPS_PROXY too (https only)
        _model(url, tokenizer, proxy=proxy).prefill([f"Context: {CANARY}"]).greedy()
        assert len(proxied) == 1 and proxied[0][0] == f"{url}/completion"  # asked: proxied


def test_a_bad_proxy_is_refused() -> None:
    with pytest.raises(ValueError, match="proxy must start with http"):
        CompletionsEndpoint("http://127.0.0.1:1/v1", model="m", proxy="proxy:3128")
    with pytest.raises(TypeError, match="did you mean 'proxy'"):
        CompletionsEndpoint("http://127.0.0.1:1/v1", model="m", proxies="http://p:1")  # type: ignore[call-arg]
