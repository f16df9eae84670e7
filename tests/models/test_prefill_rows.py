"""The eager backend's opt-in per-row prefill: each row alone, then batched.

:func:`~dprag_core.models.hf_cache.prefill_rows` (``prefill="rows"``, every
model here) prefills each row alone and
places its keys and values right-aligned in the public B x ``prompt_width``
layout. Here every row's logits, after the prefill and after each batched
decode step, must match the model run on that row's tokens alone, without a
cache (float32 rounding apart; the same greedy token): for full-attention
models, a sliding-window model whose window is shorter than the prompts, and
prompts longer than ``prompt_width`` (the row keeps its last tokens). The
mutation (rows placed left-aligned) breaks it. A model whose cache holds a
recurrent state (LFM2's convolution layers) keeps the padded batched prefill,
and its rows stay invariant. The rows' own invariance is
``test_batch_invariance.py``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build_model, build_tokenizer
from transformers import Lfm2Config, Lfm2ForCausalLM, MistralConfig, MistralForCausalLM

import dprag_core.models.hf_cache as hf_cache
from dprag_core.eval.workbench import load_models
from dprag_core.models.hf import HFTokenModel

QUESTION = "Question: Which treatment is used for flu?\nAnswer:"
PROMPTS = [
    f"Context:\nPatient A has flu, treated with Zorvex.\n\n{QUESTION}",
    "Context:\n" + "Patient B has a cold, treated with rest and fluids. " * 4 + QUESTION,
    QUESTION,
]
STEPS = 3


def _sliding(tok: Any) -> Any:
    """A Mistral whose window (8) is shorter than every prompt."""
    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        pad_token_id=tok.pad_token_id,
    )
    return MistralForCausalLM(config).eval()


def _weights(kind: str) -> tuple[Any, Any]:
    if kind == "reader":
        model = load_models()[0]
        return model.model, model.tokenizer
    tok = build_tokenizer()
    return (_sliding(tok) if kind == "sliding" else build_model(kind, tok)), tok  # type: ignore[arg-type]


def _gaps(model: HFTokenModel) -> list[float]:
    """Per step, the largest gap between the session's rows and each row's tokens run alone
    (no cache, no padding); the greedy tokens must agree."""
    rows = [ids[-model.prompt_width :] for ids in model.prompt_rows(PROMPTS)]
    session = model.prefill(PROMPTS)
    gaps = []
    for step in range(STEPS + 1):
        with torch.inference_mode():
            alone = torch.stack(
                [model.model(input_ids=torch.tensor([row])).logits[0, -1] for row in rows]
            )[:, : model.vocab_size]
        assert torch.equal(alone.argmax(-1), session._logits.argmax(-1))
        gaps.append(float((alone - session._logits).abs().max()))
        if step < STEPS:
            token = int(session.greedy()[0])
            session.step(token)
            rows = [[*row, token] for row in rows]
    return gaps


@pytest.mark.parametrize("kind", ["reader", "llama", "gpt2", "sliding"])
@pytest.mark.parametrize("width", [None, 16])  # 16: every prompt is longer, keeps its end
def test_each_row_decodes_as_it_would_alone(kind: str, width: int | None) -> None:
    model = HFTokenModel(*_weights(kind), prompt_width=width, prefill="rows")
    assert max(_gaps(model)) < 1e-4


def test_rows_placed_left_aligned_break_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: each row's keys at the left end of the padded width."""

    def left(parts: list[torch.Tensor], width: int) -> torch.Tensor:
        out = parts[0].new_zeros((len(parts), parts[0].shape[1], width, parts[0].shape[3]))
        for r, part in enumerate(parts):
            out[r, :, : part.shape[2]] = part[0]
        return out

    monkeypatch.setattr(hf_cache, "_right_aligned", left)
    with pytest.raises(AssertionError):
        _gaps(HFTokenModel(*_weights("reader"), prefill="rows"))


def test_a_recurrent_cache_keeps_the_padded_prefill() -> None:
    """LFM2's convolution layers hold a state, not keys: one padded batched forward, as
    invariant as before (the other rows' documents change, row 0 stays bit-identical)."""
    tok = build_tokenizer()
    torch.manual_seed(0)
    config = Lfm2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        layer_types=["conv", "full_attention"],
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
    )
    model = HFTokenModel(Lfm2ForCausalLM(config).eval(), tok, prefill="rows")
    ids, mask = torch.ones((1, 4), dtype=torch.long), torch.ones((1, 4), dtype=torch.long)
    assert hf_cache.prefill_rows(model._call, ids, mask) is None
    first, second = (model.prefill([PROMPTS[0], other])._logits[0] for other in PROMPTS[1:])
    assert torch.equal(first, second)


def test_rows_longer_than_the_width_stay_bit_identical() -> None:
    """Every prompt past ``prompt_width`` (16): row 0 and the public row ignore the other
    row's documents, after the prefill and after each step."""
    model = HFTokenModel(*_weights("reader"), prompt_width=16, prefill="rows")

    def trace(other: str) -> list[torch.Tensor]:
        session, out = model.prefill([PROMPTS[0], other, PROMPTS[2]]), []
        for step in range(STEPS + 1):
            out.append(torch.stack([session._logits[0], session._logits[-1]]).clone())
            if step < STEPS:
                session.step(int(session.greedy()[0]))
        return out

    shorter = f"Context:\nPatient C has gout.\n\n{QUESTION}"
    assert all(map(torch.equal, trace(PROMPTS[1]), trace(shorter)))


@pytest.mark.parametrize("kind", ["reader", "llama"])
@pytest.mark.parametrize("width", [None, 16])
def test_each_row_alone_at_the_public_width_decodes_as_alone(
    monkeypatch: pytest.MonkeyPatch, kind: str, width: int | None
) -> None:
    """benchmarks/timing.py's ``--prefill padded-rows`` (``_prefills.prefill_rows_padded``:
    each row alone, left-padded to the public width): every row's logits as the row run
    alone, the same greedy tokens, so its timings are of the same answers."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from _prefills import prefill_rows_padded
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(hf_cache, "prefill_rows", prefill_rows_padded)
    assert max(_gaps(HFTokenModel(*_weights(kind), prompt_width=width, prefill="rows"))) < 1e-4
