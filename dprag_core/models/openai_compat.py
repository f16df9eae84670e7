"""An OpenAI-compatible completions server (llama.cpp, vLLM, SGLang) as a token and text model.

:class:`OpenAICompatModel` implements :class:`~dprag_core.models.base.TokenModel`
(greedy tokens: what DPVote, DPSparseVote, VoteRAG and the greedy baselines
need) and :class:`~dprag_core.models.base.TextModel` (DP-KSA's responses) over a
:class:`~dprag_core.models.endpoint.CompletionsEndpoint`:

- prompts are built and tokens decoded with the model's own tokenizer, loaded
  locally with transformers (chat template when it has one, as
  :class:`~dprag_core.models.hf.HFTokenModel` does); the server receives token
  ids only. The server's own tokenizer is checked once, on a public probe text,
  to agree with the local one; a server whose tokenizer cannot be checked is
  refused unless ``check_tokenizer=False`` says so;
- the vocabulary and the end-of-sequence set come from the same resolver as the
  in-process engine's (:func:`~dprag_core.models.codec.special_tokens`), so one
  checkpoint stops on the same tokens in process and on a server;
- **a public envelope**: every prompt keeps its last ``prompt_width`` tokens
  (of its last ``prompt_bytes(prompt_width)`` UTF-8 bytes, the only ones tokenized),
  the rule of the in-process engine (:mod:`~dprag_core.models.envelope`), and
  the server's context (``context_length``: read from the server, or declared)
  must hold that width plus the answer: a server whose context is not above the
  width is refused when the model is built, and a mechanism whose answer would
  not fit when it is built (:func:`~dprag_core.models.envelope.check_answer_room`).
  So no prompt is ever refused for its length, whatever the documents hold;
- **the request schedule**: every row is a request of its own
  (:meth:`OpenAICompatModel.each_row`), sent once, never retried; with
  ``lookahead_tokens=1`` (the default) every decision sends every row, asking
  for the tokens it needs (1, or a word's public ``n``), whatever the rows
  buffered before: the requests are a function of the released answer and
  public parameters only;
- **a failed row abstains**: a server that refuses a row (a content filter),
  times out on it or answers it with ids that fail the check fails that row's
  request only; the row then reads an end id from there on (it votes for the
  end of the answer, a fixed public vote), the other rows are unaffected and
  nothing is sent again. Why the voting proofs still hold: whether a row's
  request fails is a function of that row alone (the question, its own voter's
  records and the released tokens) when the failure is decided by the row (a
  content filter) or independent of every row (a transient error), so one
  privacy unit still changes one voter's votes, whatever they are, which is
  the sensitivity every voting mechanism's proof counts. A timeout counts as
  the row's own outcome: keep the endpoint's ``timeout`` far above a request's
  time at the public width, so the server's load from other rows does not decide
  it;
- **speculative voting** (``lookahead_tokens`` > 1): a session keeps, for each
  row, a buffer of the row's own greedy continuation. ``greedy()`` reads each
  row's next buffered token; ``step(token)`` moves the rows whose buffered token
  was ``token`` one place on and empties the others' buffers; rows whose buffer
  is empty are refilled together with ``max_tokens: lookahead_tokens``, one
  request per row. Rows that agree with what is released send nothing; a
  refill carries only the rows that need one, so which rows are sent and how
  often depends on the documents (docs/servers.md says what a server operator
  sees). A buffered token is exactly what a one-token request would return then
  (a row's greedy continuation is a function of its own tokens), so the
  released transcript equals step-by-step decoding token for token; the
  server's prefix cache (llama.cpp's ``cache_prompt``, vLLM's and SGLang's
  automatic prefix caching) computes only each refilled row's new tokens;
- **text for the text mechanisms** (DP-KSA, DPAnswerVote read
  :meth:`OpenAICompatModel.generate_each`): one request per prompt, each sent
  once, so a server that refuses a prompt (a content filter) or times out on it
  makes that prompt abstain, the same requests going out whatever it did;
- it is *not* a :class:`~dprag_core.models.base.LogprobModel`: a server returns
  at most the top few log-probabilities, so mechanisms that need full
  next-token distributions (DP-ICL, kNN-Prompting keys) refuse it when built.

Trust boundary: the server sees the private prompts, like any model endpoint;
nothing else does (see :mod:`dprag_core.models.endpoint`). The voting proofs
assume each row's greedy token does not depend on which other rows share its
batch (docs/servers.md says how to configure each server for that).

Concurrency: the model is thread-safe (a session is one query's state; the
connection pool is shared), so many DP queries in flight (``ainvoke``,
``abatch``, ``aquery``: each runs in a worker thread) share the server, whose
continuous batching merges their steps. :meth:`OpenAICompatModel.agenerate` is
the async text path.

>>> model = OpenAICompatModel.from_pretrained(  # doctest: +SKIP
...     "http://127.0.0.1:8080/v1", "path/to/tokenizer", model="reader")
>>> DPSparseVote(model, epsilon=5.0, delta=1e-4, m=10, k=1)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from dprag_core.models.base import StopRule, stop_width
from dprag_core.models.codec import (
    TokenizerCodec,
    check_token_ids,
    special_tokens,
    token_id_problem,
)
from dprag_core.models.cut import CutText
from dprag_core.models.endpoint import Completion, CompletionsEndpoint, EndpointError, Server
from dprag_core.models.envelope import check_answer_room, keep_last, public_width
from dprag_core.validation import check_keywords, positive_int, strict_bool, strict_init

__all__ = ["PARALLEL_REQUESTS", "TOKENIZER_PROBE", "OpenAICompatModel", "OpenAICompatSession"]

TOKENIZER_PROBE = "The tokenizer probe: Question? Answer: yes, it is 42."
"""Public text whose token ids the server's and the local tokenizer must agree on."""

PARALLEL_REQUESTS = 16
"""How many one-row requests :meth:`OpenAICompatModel.each_row` has in flight at once."""

T = TypeVar("T")


class OpenAICompatSession:
    """One batch's decoding state: the B token-id rows and each row's buffered continuation.

    Each row's buffer holds the row's next greedy tokens as the server returned
    them (ending at its first end id, if it came). Requests are sent by
    :meth:`greedy` and :meth:`lookahead` only; :meth:`step` and :meth:`extend`
    send nothing. Every row is the prompt's last ``prompt_width`` tokens and the
    tokens appended since.

    Which rows are sent, each in a request of its own
    (:meth:`OpenAICompatModel.each_row`): with ``lookahead_tokens=1`` (the *public
    schedule*) every row, once per decision (the first ``greedy`` or
    ``lookahead`` after a step, and again only if a later call of the same
    decision asks for more tokens than that fill did); a row whose buffer has
    ended keeps it (the server ended the row there) and the server's answer for
    it is dropped. With ``lookahead_tokens`` > 1 (speculative) only the rows
    whose buffer is too short, and none when every buffer suffices. A row whose
    request fails (refused, timed out, ids that fail the check) abstains: its
    buffer ends there (the smallest end id, module docstring), the same as a
    server that ended the row.
    """

    def __init__(self, owner: OpenAICompatModel, rows: list[list[int]]) -> None:
        self._owner = owner
        self._rows = keep_last(rows, owner.prompt_width)
        self._ahead: list[list[int]] = [[] for _ in rows]
        self._appended = 0  # tokens appended to every row (public: the release)
        self._asked = 0  # tokens this decision's fill asked for (public schedule)

    @property
    def _public(self) -> bool:
        """Whether requests follow the public schedule (``lookahead_tokens=1``)."""
        return self._owner.lookahead_tokens == 1

    def __repr__(self) -> str:
        return f"OpenAICompatSession(rows={len(self._rows)})"

    @property
    def batch_size(self) -> int:
        """Number of rows B."""
        return len(self._rows)

    def _ended(self, ahead: list[int]) -> bool:
        return bool(ahead) and ahead[-1] in self._owner.eos_token_ids

    def _fill(self, need: int) -> None:
        """Give every row ``need`` buffered tokens or an ended buffer: one fill at most.

        The rows it sends (class docstring: all of them on the public schedule, else
        those short of ``need``) go as they are, without their buffer, with
        ``max_tokens = max(lookahead_tokens, need)``, at most what the context has left
        after a full-width row and the tokens appended: public numbers, one request
        per row. Each sent row that has not ended gets its answer as its buffer, or an
        end where its request failed (its abstain). A fill that could not
        hold ``need`` tokens is refused before it is sent (a public ValueError: the
        mechanism's build check keeps it from happening).
        """
        if self._public:
            if self._asked >= need:  # this decision's fill gave every row enough
                return
            sent = list(range(len(self._rows)))
        else:
            sent = [
                r
                for r, ahead in enumerate(self._ahead)
                if len(ahead) < need and not self._ended(ahead)
            ]
            if not sent:
                return
        check_answer_room(self._owner, self._appended + need, parameter="tokens per answer")
        count = min(
            max(self._owner.lookahead_tokens, need), self._owner.answer_room - self._appended
        )
        owner = self._owner
        answers = owner.each_row(
            [self._rows[r] for r in sent], count, lambda done: owner.continuation(done, count)
        )
        for r, answer in zip(sent, answers, strict=True):
            if not self._ended(self._ahead[r]):  # an ended row keeps its end (answer dropped)
                self._ahead[r] = [min(owner.eos_token_ids)] if answer is None else answer
        self._asked = count

    def _columns(self, width: int) -> npt.NDArray[np.intp]:
        """[B, width] from the buffers (each long enough or ended), the smallest end id past
        a row's end."""
        end = min(self._owner.eos_token_ids)
        return np.array(
            [(ahead + [end] * width)[:width] for ahead in self._ahead], dtype=np.intp
        ).reshape(len(self._ahead), width)

    def greedy(self) -> npt.NDArray[np.intp]:
        """Each row's greedy next token, shape [B] (a request when the rows need one: class
        docstring)."""
        self._fill(1)
        return np.array([ahead[0] for ahead in self._ahead], dtype=np.intp)

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> npt.NDArray[np.intp]:
        """Each row's greedy continuation of up to ``n`` tokens, [B, j]; the session is kept.

        See :class:`~dprag_core.models.base.LookaheadSession`. On the public
        schedule, every row is sent for ``n`` tokens (unless this decision's fill
        already asked for as many). Speculative: read from the buffers when
        they already hold the j columns (``stop`` true on fewer columns than every
        row has buffered); otherwise a fill of the rows short of ``n`` tokens,
        whose answers are buffered for the steps to come. A row that ended (an end
        id, a bare stop, or its request failed) reads the smallest end id from there
        on. ``stop`` is applied to the columns as a stepping session would, after
        each one, so j is the same. Nothing is appended: :meth:`greedy` and
        :meth:`step` go on as if this had not been called.

        >>> session.lookahead(4)  # doctest: +SKIP
        array([[ 330,  2360,    13, 151645], ...])
        """
        limit = positive_int("n", n)
        known = min(limit if self._ended(a) else min(len(a), limit) for a in self._ahead)
        if known and not self._public:
            table = self._columns(known)
            width = stop_width(table, stop)
            if width < known or known == limit or (stop is not None and stop(table)):
                return np.ascontiguousarray(table[:, :width])
        self._fill(limit)
        table = self._columns(limit)
        return np.ascontiguousarray(table[:, : stop_width(table, stop)])

    def step(self, token: int) -> None:
        """Append ``token`` to every row; rows whose buffered token differs drop their buffer."""
        vocab = self._owner.vocab_size
        if isinstance(token, bool) or not isinstance(token, Integral) or not 0 <= token < vocab:
            raise ValueError(f"token must be in [0, {vocab}), got {token!r}")
        self.extend([int(token)])

    def extend(self, tokens: Sequence[int]) -> None:
        """Append the same ``tokens`` to every row, like one :meth:`step` per token."""
        ids = check_token_ids(tokens, self._owner.vocab_size)
        for row, ahead in zip(self._rows, self._ahead, strict=True):
            for token in ids:
                if ahead and ahead[0] == token:
                    del ahead[0]
                else:
                    ahead.clear()
            row.extend(ids)
        self._appended += len(ids)
        self._asked = 0  # a new decision: the public schedule sends every row again


def _configs(path: str) -> list[Any]:
    """The model config and generation config stored beside a tokenizer (those found)."""
    from transformers import AutoConfig, GenerationConfig

    found = []
    for loader in (AutoConfig, GenerationConfig):
        try:
            found.append(loader.from_pretrained(path))
        except (OSError, ValueError):  # none stored there: the tokenizer alone decides
            continue
    return found


class OpenAICompatModel(TokenizerCodec):
    """A model served over OpenAI-compatible completions, with its tokenizer loaded locally.

    ``endpoint`` is the server; ``tokenizer`` the model's transformers tokenizer
    (the same checkpoint the server serves), which builds the prompts and decodes
    (:class:`~dprag_core.models.codec.TokenizerCodec`: chat template when it has
    one). ``configs``: the checkpoint's model and generation configs, whose
    ``eos_token_id`` joins the end set (:func:`~dprag_core.models.codec.special_tokens`:
    the in-process engine's rule; :meth:`from_pretrained` reads them beside the
    tokenizer); ``eos_token_ids`` replaces the set. ``lookahead_tokens``: how many
    tokens a refill request asks for per row (speculative voting, module
    docstring). The default 1 sends every row at every decision, whatever the rows
    buffered before: requests that depend on the released answer and public
    parameters only, for token and word units alike, and the server's own pace
    when voters disagree (instruct models, many voters; more would make the
    server compute tokens that are thrown away and wait for them); raise it where
    voters agree for runs of tokens, knowing that which rows are sent and how
    often then depends on the documents (docs/servers.md measures both and says
    what a server operator sees).

    ``prompt_width``: the public width every prompt is cut to (its last tokens;
    default 256, or half the context if less: the in-process rule,
    :mod:`~dprag_core.models.envelope`). ``context_length``: the tokens one
    request may hold on the server (prompt and completion; llama.cpp: ``-c /
    -np``, vLLM and SGLang: ``--max-model-len``); None reads it from the server
    (:meth:`~dprag_core.models.endpoint.CompletionsEndpoint.context_length`) and
    refuses a server that does not state it (``EndpointError``, with this fix); a
    declared value is the user's word (set it no higher than the server's). A
    context not above ``prompt_width`` is refused here (``ValueError``);
    ``answer_room`` (context minus width) bounds every mechanism's answer when
    the mechanism is built. ``check_tokenizer`` compares
    the server's tokenization of :data:`TOKENIZER_PROBE` with the local one:
    ``ValueError`` if they differ (a different model is being served),
    :class:`EndpointError` if the server cannot say (no tokenizer endpoint, an
    error, a stall past the endpoint's ``timeout``); ``check_tokenizer=False``
    skips it, on the user's word that the server serves this checkpoint.

    >>> OpenAICompatModel(object(), object())
    Traceback (most recent call last):
    TypeError: endpoint must be a CompletionsEndpoint, got object
    """

    prompt_width: int

    @strict_init
    def __init__(
        self,
        endpoint: CompletionsEndpoint,
        tokenizer: Any,
        *,
        eos_token_ids: Sequence[int] | None = None,
        configs: Sequence[Any] = (),
        check_tokenizer: bool = True,
        lookahead_tokens: int = 1,
        prompt_width: int | None = None,
        context_length: int | None = None,
    ) -> None:
        if not isinstance(endpoint, CompletionsEndpoint):
            raise TypeError(
                f"endpoint must be a CompletionsEndpoint, got {type(endpoint).__name__}"
            )
        if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
            raise TypeError("tokenizer must be a transformers tokenizer")
        super().__init__(tokenizer)
        self.endpoint = endpoint
        self.special = special_tokens(tokenizer, configs=configs, eos_token_ids=eos_token_ids)
        if not self.special.eos_token_ids:  # a bare stop (no id returned) must read as an end
            raise ValueError(
                "eos_token_ids must be given: the tokenizer, the configs and the chat template "
                f"name no end-of-sequence token id in [0, {self.special.vocab_size})"
            )
        self.lookahead_tokens = positive_int("lookahead_tokens", lookahead_tokens)
        declared = (
            None if context_length is None else positive_int("context_length", context_length)
        )
        if strict_bool("check_tokenizer", check_tokenizer):
            self._check_tokenizer()
        self.context_length = declared if declared is not None else self._served_context()
        self.prompt_width = public_width(
            prompt_width, context=self.context_length, source="server's context_length"
        )
        self.answer_room = self.context_length - self.prompt_width

    @classmethod
    def from_pretrained(
        cls,
        base_url: str,
        tokenizer: str,
        *,
        model: str,
        server: Server = "llama.cpp",
        check_tokenizer: bool = True,
        lookahead_tokens: int = 1,
        eos_token_ids: Sequence[int] | None = None,
        prompt_width: int | None = None,
        context_length: int | None = None,
        **endpoint_options: Any,
    ) -> OpenAICompatModel:
        """Connect to ``base_url`` serving ``model``; load ``tokenizer`` (name or path) locally.

        The model and generation configs stored beside the tokenizer (when there
        are) join the end set. ``endpoint_options`` go to :class:`CompletionsEndpoint`
        (``api_key``, ``headers``, ``verify``, ``timeout``, ``retries``, ``proxy``, ...).
        """
        from transformers import AutoTokenizer

        own = inspect.signature(cls.from_pretrained).parameters
        passed_on = inspect.signature(CompletionsEndpoint.__init__).parameters
        valid = [
            name
            for name, p in (*own.items(), *passed_on.items())
            if p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and name != "self")
        ]
        check_keywords("OpenAICompatModel.from_pretrained", endpoint_options, valid)
        endpoint = CompletionsEndpoint(base_url, model=model, server=server, **endpoint_options)
        return cls(
            endpoint,
            AutoTokenizer.from_pretrained(tokenizer),
            eos_token_ids=eos_token_ids,
            configs=_configs(tokenizer),
            check_tokenizer=check_tokenizer,
            lookahead_tokens=lookahead_tokens,
            prompt_width=prompt_width,
            context_length=context_length,
        )

    def __repr__(self) -> str:
        return f"OpenAICompatModel({self.endpoint!r})"

    def _served_context(self) -> int:
        try:
            return self.endpoint.context_length()
        except EndpointError as err:
            raise EndpointError(
                f"cannot read the server's context length ({err.args[0]}): pass "
                "context_length= (the tokens one request may hold: llama.cpp -c divided by "
                "-np, vLLM and SGLang --max-model-len)"
            ) from None

    def _check_tokenizer(self) -> None:
        try:
            served = self.endpoint.tokenize(TOKENIZER_PROBE)
        except EndpointError as err:
            raise EndpointError(
                f"cannot check the server's tokenizer against the local one ({err.args[0]}): "
                "pass check_tokenizer=False if the server serves the checkpoint of `tokenizer`"
            ) from None
        if served != self.encode(TOKENIZER_PROBE):
            raise ValueError(
                "the server's tokenizer disagrees with the local tokenizer on a probe text: "
                "is the server serving the same checkpoint as `tokenizer`?"
            )

    @property
    def vocab_size(self) -> int:
        """Number V of the tokenizer's tokens (ids 0..V-1)."""
        return self.special.vocab_size

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The end ids (:func:`~dprag_core.models.codec.special_tokens`)."""
        return self.special.eos_token_ids

    def continuation(self, completion: Completion, n: int) -> list[int]:
        """The greedy tokens a completion asked for ``n`` tokens shows, checked.

        Its ids up to and including the first end id. A completion that stopped
        (``finish_reason`` "stop") without returning an end id gets the smallest end
        id appended: the server ended the row there (an end id it did not return,
        or one of its own end-of-generation ids that is not in the client's set),
        and the row reads an end from there on, whatever ``n`` was asked (so a
        buffered continuation and a one-token request read the same). Every id
        must pass the codec check (an integer in [0, V)); more than ``n`` ids, or
        fewer without a stop, are an :class:`EndpointError` naming no token.

        >>> model.continuation(Completion((17, 0, 5), "stop"), 3)  # doctest: +SKIP
        [17, 0]
        >>> model.continuation(Completion((17,), "stop"), 1)  # doctest: +SKIP
        [17, 0]
        """
        ids: list[int] = list(completion.token_ids)
        stopped = completion.finish_reason == "stop"
        problem = token_id_problem(ids, self.vocab_size)
        if not problem and (len(ids) > n or (len(ids) < n and not stopped)):
            problem = "too many" if len(ids) > n else "too few without a stop"
        if problem:
            raise EndpointError(
                f"the server returned no token id in [0, {self.vocab_size}) (expected {n} "
                f"token ids or a stop; got {len(ids)} id(s), {problem})"
            )
        end = next((i + 1 for i, t in enumerate(ids) if t in self.eos_token_ids), None)
        if end is not None:
            return ids[:end]
        return [*ids, min(self.eos_token_ids)] if stopped else ids

    def tokens(self, completion: Completion, n: int) -> list[int]:
        """The ``n`` greedy tokens of a completion asked for ``n`` tokens (:meth:`continuation`,
        then the smallest end id up to ``n``).

        >>> model.tokens(Completion((17,), "stop"), 3)  # doctest: +SKIP
        [17, 0, 0]
        """
        ids = self.continuation(completion, n)
        return (ids + [min(self.eos_token_ids)] * n)[:n]

    def check_lookahead(self) -> None:
        """Nothing to refuse: a session's buffers hold each row's own continuation
        (:class:`~dprag_core.models.base.LookaheadModel`: word-level voting is allowed)."""

    def prefill(self, prompts: Sequence[str]) -> OpenAICompatSession:
        """Tokenize B prompts locally; the first :meth:`~OpenAICompatSession.greedy` sends them."""
        return OpenAICompatSession(self, self.prompt_rows(prompts))

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """One greedy completion per prompt, in one batched request (new text only).

        Each prompt keeps its last ``prompt_width`` tokens; ``max_new_tokens`` must fit
        the ``answer_room`` (``ValueError`` otherwise, whatever the prompts hold).

        Each answer's ids pass the same check as a session's (:meth:`continuation`);
        the text stops before the first end id and drops a trailing incomplete
        UTF-8 character (:meth:`~dprag_core.models.codec.TokenizerCodec.decode_answer`).
        An answer that reached ``max_new_tokens`` without an end id is a
        :class:`~dprag_core.models.cut.CutText`.
        """
        limit = check_answer_room(self, max_new_tokens)
        rows = keep_last(self.prompt_rows(prompts), self.prompt_width)
        done = self.endpoint.complete(rows, max_tokens=limit)
        return [self._answer(completion, limit) for completion in done]

    def _answer(self, completion: Completion, limit: int) -> str:
        """A completion's text (:meth:`generate`): checked ids, cut before the first end id."""
        ids = self.continuation(completion, limit)
        cut = next((i for i, t in enumerate(ids) if t in self.eos_token_ids), len(ids))
        text = self.decode_answer(ids[:cut])
        # no end id within the limit: stopped by it (dprag_core.models.cut)
        return CutText(text) if cut == len(ids) >= limit else text

    def generate_each(
        self, prompts: Sequence[str], *, max_new_tokens: int = 64
    ) -> list[str | None]:
        """One request per prompt, each sent once; None where a prompt's own request failed
        (a :class:`~dprag_core.models.base.PerPromptTextModel`).

        A server refuses a prompt for what it holds (a content filter) or stalls on it
        past the endpoint's ``timeout``: that prompt's outcome is None (a public
        abstain), its error dropped, and the other prompts' requests are unaffected.
        The schedule is fixed: B prompts are B requests of one public-width row, sent
        together (at most :data:`PARALLEL_REQUESTS` at a time, so the server batches
        them), never retried (``complete(retry=False)``: a retry would follow one
        prompt's outcome) and never re-sent. A transient failure costs that prompt's
        response, not a request more. ``max_new_tokens`` must fit the ``answer_room``
        (``ValueError``, whatever the prompts hold).
        """
        limit = check_answer_room(self, max_new_tokens)
        rows = keep_last(self.prompt_rows(prompts), self.prompt_width)
        return self.each_row(rows, limit, lambda done: self._answer(done, limit))

    def each_row(
        self, rows: Sequence[Sequence[int]], max_tokens: int, read: Callable[[Completion], T]
    ) -> list[T | None]:
        """Each token-id row in a request of its own, sent once; ``read`` of its completion,
        or None where the request or ``read`` failed (that row's public abstain).

        The schedule is a function of ``len(rows)`` and ``max_tokens`` alone: one request
        per row, at most :data:`PARALLEL_REQUESTS` in flight at once (the server batches
        them), never retried (``complete(retry=False)``: a retry would follow one row's
        outcome) and never re-sent. An error is dropped whole (an
        :class:`~dprag_core.models.endpoint.EndpointError` holds no body and no cause;
        ``read``'s check names no token). One row runs in the caller's thread; more in a
        pool, each task in a copy of the caller's context (a muted section stays muted).
        """

        def one(row: Sequence[int]) -> T | None:
            try:
                (completion,) = self.endpoint.complete([row], max_tokens=max_tokens, retry=False)
                return read(completion)
            except Exception:  # this row's failure: its abstain, whatever it was
                return None

        if len(rows) == 1:
            return [one(rows[0])]
        with ThreadPoolExecutor(max_workers=max(1, min(len(rows), PARALLEL_REQUESTS))) as pool:
            futures = [pool.submit(contextvars.copy_context().run, one, row) for row in rows]
            return [future.result() for future in futures]

    async def agenerate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        """:meth:`generate` in a worker thread (the event loop stays free)."""
        return await asyncio.to_thread(self.generate, prompts, max_new_tokens=max_new_tokens)
