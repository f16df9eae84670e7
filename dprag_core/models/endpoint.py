"""The HTTP side of an OpenAI-compatible completions server: token-id prompts in, token ids out.

:class:`CompletionsEndpoint` sends one batched ``POST {base_url}/completions``
whose ``prompt`` is a list of token-id lists, at temperature 0, and returns
each row's generated token ids (and finish reason). It never sends text: the
caller tokenizes locally with the model's own tokenizer, so the server's
tokenizer (and its chat template) never changes what the model reads.

Token ids come back as ids, never read from text. llama.cpp is asked through
its native ``POST {root}/completion`` (the same prompts and sampling, with
``return_tokens``: every generated id; its OpenAI-compatible endpoint leaves out
of ``logprobs`` each token that ends inside a UTF-8 character, so a character
split over several tokens would lose ids). The OpenAI-compatible servers return
them in the ``logprobs`` field: vLLM (with ``return_tokens_as_token_ids``) gives
``logprobs.tokens[i] == "token_id:<id>"``, others ``logprobs.content[i].id``; a
server whose logprobs carry no token id is refused with a clear error.
:data:`SERVER_OPTIONS` holds the extra request fields per server
(``cache_prompt`` for llama.cpp's prefix cache; vLLM and SGLang cache prefixes
automatically). Every id is then checked by the one codec check
(:func:`~dprag_core.models.codec.check_token_ids`): a JSON ``true``, a float, a
negative or out-of-range id is refused, never read as a token.

Proxies: the client does not read ``HTTP_PROXY`` / ``HTTPS_PROXY`` /
``ALL_PROXY`` (nor any other environment setting: httpx's ``trust_env`` is
off): the requests carry the private prompts, and a proxy set for other tools
must not see them. A proxy the prompts may cross is named with ``proxy=``.

Privacy: the prompts reach the server and nothing else. Request bodies are
never logged (the ``httpx`` / ``httpcore`` loggers are muted for the duration of
each request, :func:`dprag_core.quiet_logs.muted_logs`), and every failure is
re-raised as a fresh :class:`EndpointError` that names an HTTP status or
exception type only, with no cause and no context (the server may quote the
prompt in an error body; an ``httpx`` exception holds the request with its
body). Its traceback still passes through the caller's frames, which hold the
prompts the caller passed (as with any model): entry points run mechanisms
under :func:`dprag_core.errors.guarded`, which cuts them off. ``repr`` shows
the server's URL and model, never the API key or headers.

Retries: a request that fails in transport or with HTTP 408/429/500/502/503/504
is sent again (``retries`` times, exponential ``backoff``). That is safe:
a request is a pure function of the token ids fixed so far (temperature 0, no
server-side randomness), and nothing is released or charged by it; the caller's
state (released tokens, spent budget) is never rolled back or replayed. A
caller whose schedule must not follow outcomes (one request per prompt, each
failure that prompt's public abstain) asks ``complete(..., retry=False)``.

>>> ep = CompletionsEndpoint("http://127.0.0.1:8080/v1", model="reader", api_key="sk-x")
>>> ep
CompletionsEndpoint('http://127.0.0.1:8080/v1', model='reader', server='llama.cpp')
>>> ep.close()
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

try:
    import httpx
except ImportError as missing:
    from dprag_core.validation import missing_extra

    raise missing_extra("dprag_core.models.endpoint", missing, extra="server") from missing

from dprag_core.quiet_logs import muted_logs
from dprag_core.validation import nonnegative_finite, positive_finite, positive_int, strict_init

__all__ = [
    "CONTEXT_SOURCES",
    "SERVER_OPTIONS",
    "TOKENIZE",
    "Completion",
    "CompletionsEndpoint",
    "EndpointError",
    "Server",
    "parse_completions",
    "parse_context",
    "parse_native",
]

Server = Literal["llama.cpp", "vllm", "sglang", "openai"]

SERVER_OPTIONS: Mapping[str, Mapping[str, Any]] = {
    "llama.cpp": {
        "cache_prompt": True,
        "return_tokens": True,
        "response_fields": ["index", "tokens", "stop_type"],
    },
    "vllm": {"logprobs": 1, "return_tokens_as_token_ids": True},
    "sglang": {"logprobs": 1},
    "openai": {"logprobs": 1},
}
"""Extra request fields per server kind (besides ``model``, ``prompt``, ``max_tokens``,
``temperature``)."""

TOKENIZE: Mapping[str, tuple[str, str, Mapping[str, Any]]] = {
    "llama.cpp": ("/tokenize", "content", {"add_special": False}),
    "vllm": ("/tokenize", "prompt", {"add_special_tokens": False}),
    "sglang": ("/v1/tokenize", "prompt", {"add_special_tokens": False}),
}
"""Per server kind: the tokenizer endpoint (under the server's root), its text field and
extra fields; each answers ``{"tokens": [ids]}``. An ``"openai"`` server offers none."""

CONTEXT_SOURCES: Mapping[str, tuple[Literal["root", "base"], str]] = {
    "llama.cpp": ("root", "/props"),
    "vllm": ("base", "/models"),
    "sglang": ("base", "/models"),
}
"""Per server kind: where the server states the context of one request, under its root or
under ``base_url``: llama.cpp's ``/props`` (``default_generation_settings.n_ctx``: one
slot's cells), vLLM's and SGLang's model list (``max_model_len`` of the served model). An
``"openai"`` server states none."""

_STOP_TYPES = {"eos": "stop", "word": "stop", "limit": "length"}

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TOKEN_ID_PREFIX = "token_id:"


class EndpointError(RuntimeError):
    """A failed request: stage and status (or exception type) only, never a body.

    >>> EndpointError("completions request failed with HTTP 503").args[0]
    'completions request failed with HTTP 503'
    """


@dataclass(frozen=True)
class Completion:
    """One row's generated token ids and the server's finish reason.

    >>> Completion((5, 0), "stop").token_ids
    (5, 0)
    """

    token_ids: tuple[int, ...]
    finish_reason: str


def _check_url(url: object, name: str = "base_url", example: str = "http://host:8080/v1") -> str:
    if not isinstance(url, str):
        raise TypeError(f"{name} must be a str, got {type(url).__name__}")
    out = url.rstrip("/")
    if not out.startswith(("http://", "https://")):
        raise ValueError(f"{name} must start with http:// or https:// (e.g. {example})")
    return out


def _check_server(server: object) -> str:
    if server not in SERVER_OPTIONS:
        allowed = ", ".join(repr(s) for s in SERVER_OPTIONS)
        raise ValueError(f"server must be one of {allowed}, got {server!r}")
    return str(server)


def _token_id(entry: object) -> object:
    """One generated token's id from a logprobs entry (checked by the caller)."""
    if isinstance(entry, Mapping) and "id" in entry:
        return entry["id"]
    if isinstance(entry, str) and entry.startswith(_TOKEN_ID_PREFIX):
        digits = entry[len(_TOKEN_ID_PREFIX) :]
        if digits.isdigit():
            return int(digits)
    raise EndpointError(
        "the server returned no token ids (vLLM: return_tokens_as_token_ids; others: "
        "logprobs.content[].id); see docs/servers.md"
    )


def _ids(entries: object) -> tuple[int, ...]:
    """A response's token list as it came: every id is checked by the model, against its
    vocabulary, with the one codec check (``OpenAICompatModel.continuation``)."""
    if not isinstance(entries, list):
        raise EndpointError("the server returned no token list; see docs/servers.md")
    return tuple(entries)


def _choice_ids(choice: Mapping[str, Any]) -> tuple[int, ...]:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping):
        raise EndpointError("the server returned no logprobs; see docs/servers.md")
    entries = logprobs.get("content")
    if entries is None:
        entries = logprobs.get("tokens")
    if not isinstance(entries, list):
        raise EndpointError("the server's logprobs hold no token list; see docs/servers.md")
    return _ids([_token_id(e) for e in entries])


def parse_native(body: object, rows: int) -> list[Completion]:
    """The ``rows`` completions of a llama.cpp ``/completion`` response, ordered by ``index``.

    One object for one prompt, a list for several; each with ``index``, ``tokens``
    (every generated id) and ``stop_type`` (``eos``/``word``: "stop", ``limit``: "length").

    >>> body = [{"index": 1, "tokens": [7, 8], "stop_type": "limit"},
    ...         {"index": 0, "tokens": [2], "stop_type": "eos"}]
    >>> [(c.token_ids, c.finish_reason) for c in parse_native(body, 2)]
    [((2,), 'stop'), ((7, 8), 'length')]
    """
    results = [body] if isinstance(body, Mapping) else body
    if not isinstance(results, list) or len(results) != rows:
        raise EndpointError(f"the server returned a malformed response (expected {rows} results)")
    by_index: dict[int, Completion] = {}
    for result in results:
        index = result.get("index") if isinstance(result, Mapping) else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise EndpointError("the server returned a result without an index")
        stop = _STOP_TYPES.get(str(result.get("stop_type")))
        if stop is None:
            raise EndpointError("the server returned a result without a known stop_type")
        by_index[index] = Completion(_ids(result.get("tokens")), stop)
    return _in_order(by_index, rows)


def _in_order(by_index: Mapping[int, Completion], rows: int) -> list[Completion]:
    if sorted(by_index) != list(range(rows)):
        raise EndpointError(f"the server returned result indices other than 0..{rows - 1}")
    return [by_index[i] for i in range(rows)]


def parse_context(body: object, *, model: str) -> int | None:
    """The context, in tokens, a server's ``/props`` or model list states (None: not stated).

    llama.cpp: ``default_generation_settings.n_ctx``; vLLM and SGLang: ``max_model_len``
    of the entry of ``data`` whose ``id`` is ``model`` (or of the only entry).

    >>> parse_context({"default_generation_settings": {"n_ctx": 1024}}, model="m")
    1024
    >>> parse_context({"data": [{"id": "m", "max_model_len": 4096}]}, model="m")
    4096
    >>> parse_context({"data": []}, model="m") is None
    True
    """
    if not isinstance(body, Mapping):
        return None
    found: object = None
    settings = body.get("default_generation_settings")
    if isinstance(settings, Mapping):
        found = settings.get("n_ctx")
    models = body.get("data")
    if isinstance(models, list):
        entries = [e for e in models if isinstance(e, Mapping)]
        named = [e for e in entries if e.get("id") == model] or (
            entries if len(entries) == 1 else []
        )
        if named:
            found = named[0].get("max_model_len")
    if isinstance(found, bool) or not isinstance(found, int) or found < 1:
        return None
    return found


def parse_completions(body: object, rows: int) -> list[Completion]:
    """The ``rows`` completions of a response body, ordered by ``index``.

    >>> body = {"choices": [{"index": 1, "finish_reason": "length",
    ...                      "logprobs": {"tokens": ["token_id:7"]}},
    ...                     {"index": 0, "finish_reason": "stop",
    ...                      "logprobs": {"content": [{"id": 0}]}}]}
    >>> [c.token_ids for c in parse_completions(body, 2)]
    [(0,), (7,)]
    """
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not isinstance(choices, list) or len(choices) != rows:
        raise EndpointError(f"the server returned a malformed response (expected {rows} choices)")
    by_index: dict[int, Completion] = {}
    for choice in choices:
        index = choice.get("index") if isinstance(choice, Mapping) else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise EndpointError("the server returned a choice without an index")
        by_index[index] = Completion(_choice_ids(choice), str(choice.get("finish_reason")))
    return _in_order(by_index, rows)


class CompletionsEndpoint:
    """A thread-safe client of one OpenAI-compatible ``/completions`` endpoint.

    ``base_url`` is the API root (``http://host:port/v1``); ``model`` the served
    model's name; ``api_key`` is sent as a bearer token; ``headers`` are added to
    every request; ``verify`` is httpx's TLS setting (True, False or a CA bundle
    path); ``timeout`` seconds per request; ``server`` picks the extra request
    fields (:data:`SERVER_OPTIONS`); ``transport`` is an httpx transport (e.g. a
    Unix socket: ``httpx.HTTPTransport(uds=...)``); ``proxy`` a proxy URL the
    requests go through (none by default: ``HTTP_PROXY``/``HTTPS_PROXY``/
    ``ALL_PROXY`` and the other environment settings httpx would read are
    ignored). One connection pool serves every thread, so many DP queries can
    share the endpoint concurrently (the server batches them).

    >>> CompletionsEndpoint("localhost:8080", model="m")
    Traceback (most recent call last):
    ValueError: base_url must start with http:// or https:// (e.g. http://host:8080/v1)
    """

    @strict_init
    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        verify: bool | str = True,
        timeout: float = 120.0,
        retries: int = 2,
        backoff: float = 0.5,
        server: Server = "llama.cpp",
        max_connections: int = 64,
        transport: httpx.BaseTransport | None = None,
        proxy: str | None = None,
    ) -> None:
        self.base_url = _check_url(base_url)
        self.root = self.base_url.removesuffix("/v1")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty str (the served model's name)")
        self.model = model
        self.server = _check_server(server)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        self.retries = retries
        self.backoff = nonnegative_finite("backoff", backoff)
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise TypeError("api_key must be a non-empty str or None")
        if not isinstance(verify, (bool, str)):
            raise TypeError(f"verify must be True, False or a CA bundle path, got {verify!r}")
        connections = positive_int("max_connections", max_connections)
        if proxy is not None:
            _check_url(proxy, "proxy", "http://proxy:3128")
        sent = dict(headers or {})
        if api_key is not None:
            sent["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=sent,
            verify=verify,
            timeout=positive_finite("timeout", timeout),
            limits=httpx.Limits(max_connections=connections),
            transport=transport,
            proxy=proxy,
            trust_env=False,  # no proxy, CA bundle or netrc from the environment
        )

    def __repr__(self) -> str:
        return (
            f"CompletionsEndpoint({self.base_url!r}, model={self.model!r}, server={self.server!r})"
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def complete(
        self, prompts: Sequence[Sequence[int]], *, max_tokens: int, retry: bool = True
    ) -> list[Completion]:
        """Greedy completions (temperature 0) of token-id ``prompts``, in one batched request.

        llama.cpp: its native ``/completion`` (every generated id, module
        docstring); the others: ``/completions`` under ``base_url``. ``retry=False``
        sends the request once, whatever it meets (no retry of a transient failure:
        how many requests go out then never depends on how one ended).
        """
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "max_tokens": max_tokens,
            "temperature": 0,
            **SERVER_OPTIONS[self.server],
        }
        rows = len(body["prompt"])
        retries = self.retries if retry else 0
        if self.server == "llama.cpp":
            return parse_native(self._send(self.root + "/completion", body, retries=retries), rows)
        url = self.base_url + "/completions"
        return parse_completions(self._send(url, body, retries=retries), rows)

    def tokenize(self, text: str) -> list[int]:
        """The server's own token ids of ``text`` (its tokenizer endpoint, :data:`TOKENIZE`).

        An :class:`EndpointError` saying why when the server has none, fails, stalls
        past ``timeout`` or answers something that is not a list of ids.
        """
        if self.server not in TOKENIZE:
            raise EndpointError(f"server={self.server!r} offers no tokenizer endpoint")
        path, field, extra = TOKENIZE[self.server]
        body = {"model": self.model, field: text, **extra}
        tokens = self._send(self.root + path, body, stage="tokenize request")
        tokens = tokens.get("tokens") if isinstance(tokens, Mapping) else None
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise EndpointError(f"the server's {path} returned no list of token ids")
        return [int(t) for t in tokens]

    def context_length(self) -> int:
        """The tokens one request may hold (prompt and completion), as the server states it
        (:data:`CONTEXT_SOURCES`); an :class:`EndpointError` saying why when it cannot."""
        if self.server not in CONTEXT_SOURCES:
            raise EndpointError(f"server={self.server!r} states no context length")
        under, path = CONTEXT_SOURCES[self.server]
        url = (self.root if under == "root" else self.base_url) + path
        found = parse_context(self._send(url, None, stage="context request"), model=self.model)
        if found is None:
            raise EndpointError(f"the server's {path} states no context length")
        return found

    def _send(
        self,
        url: str,
        body: Mapping[str, Any] | None,
        *,
        stage: str = "completions request",
        retries: int | None = None,
    ) -> Any:
        failure = ""
        for attempt in range((self.retries if retries is None else retries) + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            failure, status, result = self._attempt(url, body)
            if not failure:
                return result
            if status is not None and status not in _RETRY_STATUS:
                break
        raise EndpointError(f"{stage} failed with {failure}")

    def _attempt(self, url: str, body: Mapping[str, Any] | None) -> tuple[str, int | None, Any]:
        """(failure, status, parsed body): failure is '' on success; no exception escapes.
        A POST of ``body``, or a GET when it is None."""
        try:
            with muted_logs():
                if body is None:
                    response = self._client.get(url)
                else:
                    response = self._client.post(url, json=body)
        except Exception as exc:  # httpx errors hold the request, and its body
            return type(exc).__name__, None, None
        if response.status_code != 200:
            return f"HTTP {response.status_code}", response.status_code, None
        try:
            return "", 200, response.json()
        except ValueError:
            return "a response that is not JSON", 200, None
