"""Batch-invariant rows: a row's logits depend on its own prompt only (issue 25 item 6).

The voting mechanisms' privacy argument ("one unit moves one vote") needs every
row's next token (voter or public) to be a function of that row's prompt
alone. The sessions pad every batch to the model's public ``prompt_width``
(``dprag_core/models/hf.py``, *batch invariance*), so shapes never depend on
the documents. Here the other rows' documents (and their lengths) change and
row 0 and the public row must stay bit-identical, after the prefill and after
decode steps, on every engine that runs on CPU, for the shipped reader and
the tiny test models. The mutation (the batch padded to its longest row, as
before) moves them, so the test can fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from tiny_models import build_model, build_tokenizer

import dprag_core.models.hf as hf
from dprag_core.eval.workbench import load_models
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


def _moved(weights: tuple[Any, Any], engine: str) -> list[float]:
    model = HFTokenModel(*weights, engine=engine)  # type: ignore[arg-type]
    first, second = (list(_traces(model, others)) for others in OTHERS)
    return [float((a - b).abs().max()) for a, b in zip(first, second, strict=True)]


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_a_rows_logits_ignore_the_other_rows(weights: tuple[Any, Any], engine: str) -> None:
    assert _moved(weights, engine) == [0.0] * (STEPS + 1)  # bit-identical, every step


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
    assert narrow.prompt_width == 16 and full.prompt_width == hf.DEFAULT_PROMPT_WIDTH
    longer = f"Context:\nPatient E has a rash.\n{OWN}"
    assert narrow.prompt_ids(longer)[-16:] == narrow.prompt_ids(OWN)[-16:]

    def logits(model: HFTokenModel, prompt: str) -> torch.Tensor:
        return model.prefill([prompt])._logits[0].clone()

    assert torch.equal(logits(narrow, OWN), logits(narrow, longer))
    assert not torch.equal(logits(full, OWN), logits(full, longer))


@pytest.mark.parametrize("bad", [0, -3, 1024, 10**6])
def test_a_prompt_width_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match=r"prompt_width must be"):
        HFTokenModel(*_reader(), prompt_width=bad)
