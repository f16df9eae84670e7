"""Deterministic completion servers for the OpenAI-compatible client's tests (no network).

Both speak llama.cpp's native ``POST /completion`` (token-id prompts, every
generated id back, ``stop_type``) and ``GET /props`` (the context of one slot,
``n_ctx``) through an ``httpx.MockTransport``, and record every completion
request, so a test can compare what the client sent. Like llama.cpp, a server
refuses a prompt of ``n_ctx`` tokens or more (HTTP 400) and stops a row whose
prompt and answer fill the context (``stop_type`` "limit", fewer tokens):

- :class:`ScriptedServer`: each row's greedy token is a fixed function of the
  row's own token ids (its prompt picks an answer script by keyword; a row whose
  answer left its script continues with a deterministic token, then ends), so
  voters agree, disagree and end where a test wants them to;
- :class:`ModelServer`: each row's greedy token is a real transformers model's
  argmax over the row's whole token sequence, recomputed from scratch for every
  token (no cache): the same function of the row's ids whenever it is asked.

:class:`ContextLimited` puts a context limit in front of either, as llama.cpp
and vLLM have one: a request with a row whose prompt does not fit answers HTTP
400 (llama.cpp's ``exceed_context_size_error``) and is recorded like any other.

:func:`recording` wraps a token model so that the tokens every session appends
are recorded (the released transcript), with lookahead passed through.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import torch

from dprag_core.models.base import StopRule
from dprag_core.models.endpoint import CompletionsEndpoint
from dprag_core.models.openai_compat import OpenAICompatModel

__all__ = ["ContextLimited", "ModelServer", "Recorded", "ScriptedServer", "served"]


class _Server:
    """A native /completion endpoint over ``next_token(ids)``; records each request."""

    def __init__(self, eos: int, n_ctx: int = 4096) -> None:
        self.eos, self.n_ctx = eos, n_ctx
        self.requests: list[dict[str, Any]] = []
        self.sent_bytes = 0

    def next_token(self, ids: list[int]) -> int:
        raise NotImplementedError

    def complete(self, prompt: list[int], count: int) -> list[int]:
        ids, out = list(prompt), []
        while len(out) < count and len(ids) < self.n_ctx:
            out.append(self.next_token(ids))
            ids.append(out[-1])
            if out[-1] == self.eos:
                break
        return out

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json={"default_generation_settings": {"n_ctx": self.n_ctx}})
        assert request.url.path == "/completion"
        body = json.loads(request.content)
        self.requests.append(body)
        self.sent_bytes += len(request.content)
        if any(len(prompt) >= self.n_ctx for prompt in body["prompt"]):
            return httpx.Response(400, json={"error": {"type": "exceed_context_size_error"}})
        results = []
        for index, prompt in enumerate(body["prompt"]):
            tokens = self.complete(prompt, body["max_tokens"])
            stop = "eos" if tokens and tokens[-1] == self.eos else "limit"
            results.append({"index": index, "tokens": tokens, "stop_type": stop})
        return httpx.Response(200, json=results[0] if len(results) == 1 else results)


class ScriptedServer(_Server):
    """Rows answer from ``scripts`` (keyword in the prompt -> answer text; "" matches all).

    The prompt is the text up to the last ``"Answer:"``; the answer so far the ids
    after it. On its script (the answer's ids are the script's first ids), a row's
    next token is the script's next token (EOS at its end); off it, a token picked
    by a checksum of the answer's text, and EOS once that text is longer than
    ``wander`` characters.
    """

    def __init__(
        self,
        tokenizer: Any,
        scripts: Mapping[str, str],
        *,
        eos: int,
        wander: int = 14,
        n_ctx: int = 4096,
    ) -> None:
        super().__init__(eos, n_ctx)
        self.tokenizer, self.wander = tokenizer, wander
        self.scripts = {
            k: tokenizer.encode(v, add_special_tokens=False) for k, v in scripts.items()
        }
        self.letters = tokenizer.encode(" abcdefgh", add_special_tokens=False)

    def next_token(self, ids: list[int]) -> int:
        decode = self.tokenizer.decode
        prompt, _, answer = decode(ids, skip_special_tokens=True).rpartition("Answer:")
        script = next(s for key, s in self.scripts.items() if key in prompt)
        for t in range(min(len(script), len(ids)), -1, -1):  # the answer's ids: script[:t]?
            head = ids[: len(ids) - t]
            if ids[len(head) :] == script[:t] and decode(head).endswith("Answer:"):
                return script[t] if t < len(script) else self.eos
        if len(answer) > self.wander:
            return self.eos
        return self.letters[zlib.crc32(answer.encode()) % len(self.letters)]


class ModelServer(_Server):
    """Greedy tokens of a transformers causal LM, each from a fresh forward of the whole row."""

    def __init__(self, model: Any, *, eos: int, n_ctx: int = 4096) -> None:
        super().__init__(eos, n_ctx)
        self.model = model

    def next_token(self, ids: list[int]) -> int:
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1]
        return int(logits.argmax())


class ContextLimited:
    """``server`` behind a context of ``n_ctx`` tokens: a prompt of ``n_ctx`` or more is refused.

    The refusal is llama.cpp's (HTTP 400, ``exceed_context_size_error``, the
    counts in the body); vLLM refuses the same way. Every request is recorded in
    ``server.requests`` whether it was refused or not.
    """

    def __init__(self, server: _Server, *, n_ctx: int) -> None:
        self.server, self.n_ctx = server, n_ctx

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/completion":
            return self.server(request)
        body = json.loads(request.content)
        longest = max((len(p) for p in body["prompt"]), default=0)
        if longest < self.n_ctx:
            return self.server(request)
        self.server.requests.append(body)
        self.server.sent_bytes += len(request.content)
        error = {
            "code": 400,
            "message": f"request ({longest} tokens) exceeds the available context size "
            f"({self.n_ctx} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": longest,
            "n_ctx": self.n_ctx,
        }
        return httpx.Response(400, json={"error": error})


def served(
    server: _Server | ContextLimited, tokenizer: Any, *, lookahead_tokens: int, **kw: Any
) -> OpenAICompatModel:
    """An OpenAICompatModel on ``server`` (llama.cpp protocol, no tokenizer check; its
    context read from the server's /props)."""
    endpoint = CompletionsEndpoint(
        "http://server.test/v1", model="m", transport=httpx.MockTransport(server)
    )
    return OpenAICompatModel(
        endpoint, tokenizer, check_tokenizer=False, lookahead_tokens=lookahead_tokens, **kw
    )


class Recorded:
    """A token model whose sessions record what they show and what is appended to them.

    ``appended``: per session, every appended token (the released transcript);
    ``seen``: per session, every ``greedy()`` and ``lookahead()`` result as lists
    (the votes the mechanism read).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.appended: list[list[int]] = []
        self.seen: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:  # vocab_size, eos_token_ids, encode, decode
        return getattr(self.inner, name)

    def check_lookahead(self) -> None:  # explicit: Python 3.12 protocols ignore __getattr__
        self.inner.check_lookahead()

    def prefill(self, prompts: Sequence[str]) -> RecordedSession:
        self.appended.append([])
        self.seen.append([])
        return RecordedSession(
            self.inner.prefill(prompts), self.appended[-1].extend, self.seen[-1].append
        )


class RecordedSession:
    """Passes everything to ``inner``; reports appended tokens and shown votes."""

    def __init__(
        self,
        inner: Any,
        record: Callable[[list[int]], None],
        show: Callable[[Any], None],
    ) -> None:
        self.inner, self.record, self.show = inner, record, show

    def greedy(self) -> npt.NDArray[np.intp]:
        out = np.asarray(self.inner.greedy())
        self.show(out.tolist())
        return out

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        out = np.asarray(self.inner.lookahead(n, stop=stop))
        self.show(out.tolist())
        return out

    def step(self, token: int) -> None:
        self.record([int(token)])
        self.inner.step(token)

    def extend(self, tokens: Sequence[int]) -> None:
        self.record([int(t) for t in tokens])
        self.inner.extend(tokens)
