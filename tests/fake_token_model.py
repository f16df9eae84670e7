"""A deterministic, scripted TokenModel for testing the token-level mechanisms.

Byte-level vocabulary: ids 0..255 are bytes, ``EOS`` = 256. Each row's greedy
token is decided by its prompt: the first rule ``(substring, answer)`` whose
substring occurs in the row's prompt gives the row's answer; at step t the row
puts probability 0.9 on the t-th byte of its answer (EOS past the end), the rest
spread evenly. The model records every prefill and step, so tests can check
that a mechanism runs ONE session of m+1 rows and ONE step per released token.
It implements both protocols: ``greedy()`` for the voting mechanisms and
``logprobs`` (via ``prefill_logprobs``) for DP-ICL; ``logprob_reads`` counts
how often the full rows were read. ``lookahead(n)`` shows each row's next n
answer bytes without stepping (``steps`` counts only real steps,
``lookahead_calls`` the lookaheads).

>>> fake = FakeTokenModel([("Context", "ab"), ("", "xy")])
>>> s = fake.prefill(["Context: doc\\nQ", "Q"])
>>> s.greedy().tolist() == [ord("a"), ord("x")]
True
>>> [int(r.argmax()) for r in s.logprobs] == [ord("a"), ord("x")]
True
>>> s.lookahead(3).tolist() == [[ord("a"), ord("b"), EOS], [ord("x"), ord("y"), EOS]]
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dprag_core.models.base import StopRule, stop_width
from dprag_core.validation import positive_int

__all__ = ["EOS", "FakeSession", "FakeTokenModel"]

EOS = 256
VOCAB = 257


class FakeSession:
    """Scripted rows; ``step`` appends the same token to all of them."""

    def __init__(self, owner: FakeTokenModel, answers: list[bytes]) -> None:
        self._owner = owner
        self._answers = answers
        self.appended: list[int] = []

    def _rows(self) -> np.ndarray:
        t = len(self.appended)
        rows = np.full((len(self._answers), VOCAB), math.log(0.1 / (VOCAB - 1)), dtype=np.float32)
        for i, ans in enumerate(self._answers):
            rows[i, ans[t] if t < len(ans) else EOS] = math.log(0.9)
        return rows

    def greedy(self) -> np.ndarray:
        t = len(self.appended)
        return np.array([a[t] if t < len(a) else EOS for a in self._answers], dtype=np.intp)

    @property
    def logprobs(self) -> np.ndarray:
        self._owner.logprob_reads += 1
        return self._rows()

    def lookahead(self, n: int, *, stop: StopRule | None = None) -> np.ndarray:
        """Each row's next answer bytes (EOS past the end), up to ``n`` columns; no step."""
        limit = positive_int("n", n)
        self._owner.lookahead_calls += 1
        t = len(self.appended)
        table = np.array(
            [[a[i] if i < len(a) else EOS for i in range(t, t + limit)] for a in self._answers],
            dtype=np.intp,
        )
        return table[:, : stop_width(table, stop)]

    def extend(self, tokens: Sequence[int]) -> None:
        assert tokens
        for token in tokens:
            self.step(token)

    def step(self, token: int) -> None:
        assert 0 <= token < VOCAB
        self.appended.append(int(token))
        self._owner.steps += 1


class FakeTokenModel:
    """See the module docstring; ``rules`` is a list of (substring, answer text)."""

    def __init__(self, rules: Sequence[tuple[str, str | bytes]]) -> None:
        self.rules = list(rules)
        self.sessions: list[FakeSession] = []
        self.prompts: list[list[str]] = []
        self.steps = 0
        self.logprob_reads = 0
        self.lookahead_calls = 0

    @property
    def vocab_size(self) -> int:
        return VOCAB

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS})

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def _answer(self, prompt: str) -> bytes:
        for needle, answer in self.rules:
            if needle in prompt:  # a str answer as UTF-8, or any bytes as they are
                return answer.encode("utf-8") if isinstance(answer, str) else answer
        return b""

    def check_lookahead(self) -> None:
        """Its sessions look ahead (a LookaheadModel)."""

    def prefill(self, prompts: Sequence[str]) -> FakeSession:
        self.prompts.append(list(prompts))
        session = FakeSession(self, [self._answer(p) for p in prompts])
        self.sessions.append(session)
        return session

    def prefill_logprobs(self, prompts: Sequence[str]) -> FakeSession:
        return self.prefill(prompts)
