"""``lookahead``: each row's own greedy continuation, and the session exactly as before.

For the eager and static engines on tiny models: a lookahead of n tokens equals,
row by row, greedy decoding of that row alone; after it, ``greedy()``,
``logprobs`` and every later step equal (bit for bit) those of a twin session
that never looked ahead. When the lookahead makes a static batch grow, the
session computes on a longer cache than its twin until the twin grows too, and
the keys and values written meanwhile differ in the last bits: from then on the
greedy tokens agree and the log-probabilities within 1e-5, on every kernel family
(on AVX-512 kernels they happened to agree bit for bit again once the twin grew;
with AVX2 kernels forced, 20 of 960 stayed off by up to 4.8e-7). Which batch a
session holds is decided by public numbers, so two sessions over neighbouring
corpora grow at the same steps (tests/models/test_batch_invariance.py).
tests/models/test_cpu_kernels.py runs this file again with AVX2 kernels forced.
The CUDA-graph engines are checked the same way where a GPU is present.
The OpenAI-compatible session is tests/models/test_openai_compat.py (a mock
server) and tests/models/test_llama_server.py (a real one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from fake_token_model import EOS, FakeTokenModel
from tiny_models import ModelKind

from dprag_core.models import LookaheadSession, hf_static
from dprag_core.models.hf import Engine, HFStaticSession, HFTokenModel, HFTokenSession

PROMPTS = [
    "Alice",
    "Question: What disease does Bob Durand have?\nAnswer:",
    "Context: Chloé takes metformin.",
]
KINDS = ("gpt2", "llama", "qwen2")
CPU_CASES = [(kind, engine) for kind in KINDS for engine in ("eager", "static")]
GPU_CASES = [("llama", "cuda_graphs"), ("qwen2", "cuda_graphs"), ("llama", "compiled")]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets of 4 slots and 2 of headroom, so that a lookahead makes a batch grow."""
    monkeypatch.setattr(hf_static, "BUCKET", 4)
    monkeypatch.setattr(hf_static, "HEADROOM", 2)


def _alone(tm: HFTokenModel, prompt: str, shared: list[int], n: int) -> list[int]:
    """Greedy decoding of one prompt alone, after the ``shared`` tokens: n tokens."""
    session = tm.prefill([prompt])
    for token in shared:
        session.step(token)
    out = []
    for _ in range(n):
        out.append(int(session.greedy()[0]))
        session.step(out[-1])
    return out


def _own_greedy(tm: HFTokenModel, n: int) -> None:
    """lookahead(n) before and after shared steps equals each row's own greedy decoding."""
    session = tm.prefill(PROMPTS)
    shared: list[int] = []
    for round_ in range(2):
        table = session.lookahead(n)
        assert table.shape == (len(PROMPTS), n) and table.dtype == np.intp
        for r, prompt in enumerate(PROMPTS):
            assert table[r].tolist() == _alone(tm, prompt, shared, n)
        assert len({tuple(row) for row in table.tolist()}) > 1  # the rows really differ
        for _ in range(round_ + 2):
            shared.append(int(session.greedy()[1]))
            session.step(shared[-1])


def _lengths(*sessions: HFTokenSession) -> set[int]:
    """The static batches' lengths (empty for eager sessions)."""
    return {s._batch.length for s in sessions if isinstance(s, HFStaticSession)}


def _assert_same(looked: HFTokenSession, twin: HFTokenSession, seen: set[bool]) -> None:
    """Same greedy tokens; same log-probabilities, bit for bit while the caches have
    always had one length (``seen`` records each check's: True for one, False for two).

    A lookahead that grew a static batch leaves the session on a longer cache
    than its twin until the twin grows too: attention over more (closed) slots
    rounds differently in the last bits, as any two cache lengths do, and the keys
    and values written meanwhile carry that difference on (module docstring).
    """
    np.testing.assert_array_equal(looked.greedy(), twin.greedy())
    same_length = len(_lengths(looked, twin)) <= 1
    seen.add(same_length)
    if same_length and False not in seen:
        np.testing.assert_array_equal(looked.logprobs, twin.logprobs)
    else:
        np.testing.assert_allclose(looked.logprobs, twin.logprobs, atol=1e-5, rtol=0)


def _same_as_twin(tm: HFTokenModel, n: int, rounds: int) -> set[bool]:
    """After each lookahead, greedy, logprobs and the next steps equal a twin's.

    Returns whether the caches had one length (True) or two (False) at the checks.
    """
    looked, twin = tm.prefill(PROMPTS), tm.prefill(PROMPTS)
    seen: set[bool] = set()
    for round_ in range(rounds):
        lp_before = looked.logprobs.copy()  # read before: the restored copy must stay right
        table = looked.lookahead(n)
        np.testing.assert_array_equal(table[:, 0], twin.greedy())
        np.testing.assert_array_equal(looked.logprobs, lp_before)
        for _ in range(round_ % 3 + 1):
            _assert_same(looked, twin, seen)
            token = int(twin.greedy()[round_ % len(PROMPTS)])
            looked.step(token)
            twin.step(token)
    _assert_same(looked, twin, seen)
    if isinstance(looked, HFStaticSession):
        _check_static_state(looked)
    return seen


def _check_static_state(session: HFStaticSession) -> None:
    """Every layer's slot counter agrees with the host count; no slot past it is open."""
    batch = session._batch
    filled = batch.length - session._free_slots
    assert {int(layer.cumulative_length) for layer in batch.layers} == {filled}
    assert bool((batch.mask[..., filled:] == batch.closed).all())


@pytest.mark.parametrize(("kind", "engine"), CPU_CASES)
def test_lookahead_is_each_rows_own_greedy_decoding(
    kind: str, engine: Engine, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    tm = HFTokenModel(tiny_hf_models[kind], tiny_tokenizer, engine=engine)
    assert isinstance(tm.prefill(PROMPTS), LookaheadSession)
    _own_greedy(tm, n=6)


@pytest.mark.parametrize(("kind", "engine"), CPU_CASES)
def test_the_session_is_exactly_as_before(
    kind: str, engine: Engine, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    tm = HFTokenModel(tiny_hf_models[kind], tiny_tokenizer, engine=engine)
    assert _same_as_twin(tm, n=5, rounds=6) == {True}  # no growth: bit for bit throughout


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_a_lookahead_that_grows_the_batch(
    kind: str, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, small_buckets: None
) -> None:
    tm = HFTokenModel(tiny_hf_models[kind], tiny_tokenizer, engine="static")
    session = tm.prefill(PROMPTS)
    assert isinstance(session, HFStaticSession)
    first = session._batch
    free = session._free_slots
    table = session.lookahead(free + 6)  # more steps than the batch has slots
    assert session._batch.length > first.length  # it grew during the lookahead
    assert session._free_slots == session._batch.length - first.length + free
    _check_static_state(session)
    for r, prompt in enumerate(PROMPTS):
        assert table[r].tolist() == _alone(tm, prompt, [], free + 6)
    assert False in _same_as_twin(tm, n=9, rounds=6)  # each lookahead grows the batch


def test_after_a_growing_lookahead_the_twin_grows_too_and_agrees(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, small_buckets: None
) -> None:
    tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine="static")
    looked, twin = tm.prefill(PROMPTS), tm.prefill(PROMPTS)
    assert isinstance(looked, HFStaticSession) and isinstance(twin, HFStaticSession)
    looked.step(5)
    twin.step(5)
    free = looked._free_slots
    looked.lookahead(free + 2)  # free + 1 forwards: one more than the batch has slots
    seen: set[bool] = set()
    for i in range(free + 1):  # the twin grows at the last of these steps
        _assert_same(looked, twin, seen)
        token = int(twin.greedy()[i % len(PROMPTS)])
        looked.step(token)
        twin.step(token)
    assert len(_lengths(looked, twin)) == 1  # the twin grew too
    _assert_same(looked, twin, seen)  # tokens equal, log-probabilities within rounding
    assert seen == {True, False}
    looked.lookahead(2)  # within the batch now: the session as it was
    _assert_same(looked, twin, seen)
    _check_static_state(looked)


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_stop_ends_the_lookahead_early(
    engine: Engine, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine=engine)
    session = tm.prefill(PROMPTS)
    full = session.lookahead(6)
    seen: list[tuple[int, ...]] = []

    def stop_at_three(tokens: npt.NDArray[np.intp]) -> bool:
        seen.append(tokens.shape)
        return bool(tokens.shape[1] == 3)

    np.testing.assert_array_equal(session.lookahead(6, stop=stop_at_three), full[:, :3])
    assert seen == [(3, 1), (3, 2), (3, 3)]
    np.testing.assert_array_equal(session.lookahead(6, stop=lambda t: True), full[:, :1])
    np.testing.assert_array_equal(session.lookahead(1, stop=lambda t: False), full[:, :1])


@pytest.mark.parametrize("n", [0, -1, True, 2.5, "3"])
def test_bad_n_is_refused(n: Any, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> None:
    for engine in ("eager", "static"):
        tm = HFTokenModel(tiny_hf_models["qwen2"], tiny_tokenizer, engine=engine)
        session = tm.prefill(PROMPTS)
        before = session.logprobs.copy()
        with pytest.raises((TypeError, ValueError), match="n must be an integer >= 1"):
            session.lookahead(n)
        np.testing.assert_array_equal(session.logprobs, before)
    fake = FakeTokenModel([("", "ab")]).prefill(["q"])
    with pytest.raises((TypeError, ValueError), match="n must be an integer >= 1"):
        fake.lookahead(n)


def test_a_failed_step_still_restores(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop rule that raises: the error propagates and the session is as before."""
    for engine in ("eager", "static"):
        tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine=engine)
        looked, twin = tm.prefill(PROMPTS), tm.prefill(PROMPTS)

        def broken(tokens: npt.NDArray[np.intp]) -> bool:
            if tokens.shape[1] == 3:
                raise RuntimeError("stop rule failed")
            return False

        with pytest.raises(RuntimeError, match="stop rule failed"):
            looked.lookahead(5, stop=broken)
        looked.step(7)
        twin.step(7)
        np.testing.assert_array_equal(looked.logprobs, twin.logprobs)


def test_the_eager_session_needs_full_attention_layers(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    session = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer).prefill(PROMPTS)
    assert isinstance(session, HFTokenSession)
    session._backend._cache.layers.append(object())  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="full attention"):
        session.lookahead(2)


def test_a_sliding_window_model_is_refused_when_the_mechanism_is_built(
    tiny_tokenizer: Any,
) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    from dprag_core.algorithms import DPVote

    config = MistralConfig(
        vocab_size=len(tiny_tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
    )
    tm = HFTokenModel(MistralForCausalLM(config).eval(), tiny_tokenizer)
    settings = {"m": 2, "k": 1, "epsilon": 4.0, "delta": 1e-4, "epsilon_token": 1.0}
    with pytest.raises(ValueError, match="needs a model whose cache layers are all full attention"):
        DPVote(tm, max_new_tokens=4, unit="word", **settings)
    DPVote(tm, max_new_tokens=4, **settings)  # tokens need no lookahead


def test_the_fake_session_looks_ahead_without_stepping() -> None:
    fake = FakeTokenModel([("Context", "abc"), ("", "x")])
    session = fake.prefill(["Context: d", "q"])
    session.step(ord("a"))
    table = session.lookahead(4)
    assert table.tolist() == [[ord("b"), ord("c"), EOS, EOS], [EOS] * 4]
    assert session.lookahead(4, stop=lambda t: t.shape[1] == 2).shape == (2, 2)
    assert (fake.steps, fake.lookahead_calls) == (1, 2)
    assert session.greedy().tolist() == [ord("b"), EOS]


@needs_cuda
@pytest.mark.parametrize(("kind", "engine"), GPU_CASES)
def test_graph_engines_look_ahead_exactly(
    kind: ModelKind, engine: Engine, tiny_tokenizer: Any, small_buckets: None
) -> None:
    from tiny_models import build_model

    model = build_model(kind, tiny_tokenizer).to("cuda")
    tm = HFTokenModel(model, tiny_tokenizer, engine=engine)
    eager = HFTokenModel(model, tiny_tokenizer)
    for n in (1, 6, 9):  # small buckets: the longer lookaheads grow the batch
        table = tm.prefill(PROMPTS).lookahead(n)
        np.testing.assert_array_equal(table, eager.prefill(PROMPTS).lookahead(n))
    assert False in _same_as_twin(tm, n=9, rounds=6)


def test_extend_is_one_step_per_token(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> None:
    """``extend`` (one [B, w] forward on the eager engine, w steps on the static one) leaves
    the session where w ``step`` calls do: the same greedy tokens, log-probabilities up
    to float rounding, and the same later steps."""
    for engine in ("eager", "static"):
        tm = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, engine=engine)
        extended, stepped = tm.prefill(PROMPTS), tm.prefill(PROMPTS)
        word = [int(t) for t in extended.lookahead(4)[0]]
        extended.extend(word)
        for token in word:
            stepped.step(token)
        for _ in range(3):
            np.testing.assert_array_equal(extended.greedy(), stepped.greedy())
            np.testing.assert_allclose(extended.logprobs, stepped.logprobs, atol=1e-5)
            token = int(stepped.greedy()[0])
            extended.step(token)
            stepped.step(token)


@pytest.mark.parametrize("tokens", [[], [-1], [10**6], [1, 10**6]])
def test_extend_refuses_tokens_outside_the_vocabulary(
    tokens: list[int], tiny_hf_models: dict[str, Any], tiny_tokenizer: Any
) -> None:
    session = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer).prefill(PROMPTS)
    with pytest.raises(ValueError, match="tokens must be at least one token id"):
        session.extend(tokens)
