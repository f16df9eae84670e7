"""Datastore keys (embeddings, LM next-token distributions) and the membership-inference attack."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from dprag_core.datastore import DPSimHashDatastore, embedding_keys, token_distribution_keys
from dprag_core.eval.mia import membership_inference, mia_features


class _DistributionSession:
    def __init__(self, rows: np.ndarray) -> None:
        self.logprobs = rows

    def greedy(self) -> np.ndarray:
        raise AssertionError("keys need the prefill distribution only")

    def step(self, token: int) -> None:
        raise AssertionError("keys need the prefill distribution only")


class _PromptLengthModel:
    """A TokenModel whose next-token distribution depends on the prompt's length."""

    vocab_size = 8
    eos_token_ids = frozenset({0})

    def encode(self, text: str) -> list[int]:
        return [len(text) % 8]

    def decode(self, ids: Sequence[int]) -> str:
        return ""

    def prefill_logprobs(self, prompts: Sequence[str]) -> _DistributionSession:
        logits = np.full((len(prompts), 8), -5.0)
        logits[np.arange(len(prompts)), [len(p) % 8 for p in prompts]] = 0.0
        return _DistributionSession(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))


def test_token_distribution_keys_are_unit_sqrt_probabilities() -> None:
    keys = token_distribution_keys(_PromptLengthModel(), ["a", "bb", "a", "ccc"], batch_size=3)
    assert keys.shape == (4, 8)
    np.testing.assert_allclose(np.linalg.norm(keys, axis=1), 1.0)
    np.testing.assert_allclose(keys[0], keys[2])
    assert keys[0] @ keys[1] < 0.5


def test_embedding_keys_validate() -> None:
    with pytest.raises(ValueError, match="texts"):
        embedding_keys(lambda t: np.ones((len(t), 2)), [])
    with pytest.raises(ValueError, match="one vector per text"):
        embedding_keys(lambda t: np.ones((1, 2)), ["a", "b"])


def _members_and_non_members() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(1600, 12))
    labels = rng.integers(0, 2, 1600)
    return keys[:800], labels[:800], keys[800:], labels[800:]


def test_mia_wins_without_dp_and_drops_to_chance_with_dp() -> None:
    mk, ml, nk, nl = _members_and_non_members()
    exact = DPSimHashDatastore.non_private(mk, ml, num_classes=2, tables=8, bits=14)
    strong = membership_inference(exact, mk, ml, nk, nl, rng=0)
    assert strong.accuracy > 0.9  # sparse buckets: members hit non-empty buckets
    private = DPSimHashDatastore.release(
        mk, ml, num_classes=2, epsilon=0.5, tables=8, bits=14, rng=1
    )
    weak = membership_inference(private, mk, ml, nk, nl, rng=0)
    assert weak.advantage < 0.1
    assert mia_features(private, nk[:5], nl[:5]).shape == (5, 7)
