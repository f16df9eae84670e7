"""The eager engine's prefill by default is one forward over the public width.

Whatever the device and torch's thread count, a session's prefill is one
forward of shape [B, ``prompt_width`` + 1] (the public layout and its closed
slot) whatever the prompts hold, so its work does not follow the retrieved
rows' token counts. Here the forwards a prefill runs are recorded (a forward
pre-hook on the real model) for prompts of different token counts, with one and
with two torch threads, through :class:`~dprag_core.models.hf.HFTokenModel` and
:class:`~dprag_core.models.hf.HFTextModel`. The opt-in ``prefill="rows"`` is
the positive control: its forwards follow each row's own token count, and the
same recording tells the two apart. ``prefill`` is checked: a misspelt value,
and ``"rows"`` on another engine, are refused with the parameter named.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from tiny_models import build_model, build_tokenizer

from dprag_core.models.hf import HFTextModel, HFTokenModel

QUESTION = "Question: Which treatment is used for flu?\nAnswer:"
SHORT = [f"Context:\nPatient A has flu.\n\n{QUESTION}", QUESTION]
LONG = [
    "Context:\n" + "Patient B has a cold, treated with rest and fluids. " * 2 + QUESTION,
    QUESTION,
]


@pytest.fixture(scope="module")
def weights() -> tuple[Any, Any]:
    tok = build_tokenizer()
    return build_model("llama", tok), tok  # type: ignore[arg-type]


@contextmanager
def threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` while inside."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def prefill_shapes(model: HFTokenModel, prompts: Sequence[str]) -> list[tuple[int, ...]]:
    """The ``input_ids`` shape of every forward one prefill of ``prompts`` runs."""
    shapes: list[tuple[int, ...]] = []

    def record(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        shapes.append(tuple(kwargs["input_ids"].shape))

    hook = model.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        model.prefill(prompts)
    finally:
        hook.remove()
    return shapes


@pytest.mark.parametrize("n_threads", [1, 2])
def test_the_default_prefill_is_one_public_width_forward(
    weights: tuple[Any, Any], n_threads: int
) -> None:
    model = HFTokenModel(*weights, prompt_width=160)
    assert model.prefill_kind == "padded"
    short, long = (len(model.prompt_ids(p)) for p in (SHORT[0], LONG[0]))
    assert short < long < model.prompt_width  # the rows' token counts differ
    with threads(n_threads):
        shapes = [prefill_shapes(model, prompts) for prompts in (SHORT, LONG)]
    assert shapes == [[(2, model.prompt_width + 1)]] * 2


def test_the_text_models_default_prefill_is_the_public_width(weights: tuple[Any, Any]) -> None:
    text_model = HFTextModel(*weights, prompt_width=160)
    widths: list[tuple[int, ...]] = []

    def record(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        widths.append(tuple(kwargs["input_ids"].shape))

    hook = text_model.token_model.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with threads(1):
            for prompts in (SHORT, LONG):
                text_model.generate(prompts, max_new_tokens=2)
    finally:
        hook.remove()
    first = (2, 160 + 1)  # the prefill, then one [2, 1] step per new token after the first
    assert widths == [first, (2, 1)] * 2


def test_rows_follow_each_rows_token_count(weights: tuple[Any, Any]) -> None:
    """The opt-in (and the control that the recording above can tell them apart)."""
    model = HFTokenModel(*weights, prompt_width=160, prefill="rows")
    assert model.prefill_kind == "rows"
    with threads(1):
        short, long = (prefill_shapes(model, prompts) for prompts in (SHORT, LONG))
    assert len(short) == len(long) == 2  # one forward per row
    assert short != long and short[1] == long[1]  # only the first row's tokens changed
    assert short[0] == (1, len(model.prompt_ids(SHORT[0])))


@pytest.mark.parametrize("bad", ["row", "Rows", "batched", "", None, 1])
def test_a_misspelt_prefill_is_refused(weights: tuple[Any, Any], bad: Any) -> None:
    with pytest.raises(ValueError, match=r"prefill must be one of \('padded', 'rows'\)"):
        HFTokenModel(*weights, prefill=bad)
    with pytest.raises(ValueError, match=r"prefill must be one of"):
        HFTextModel(*weights, prefill=bad)


def test_rows_on_another_engine_is_refused(weights: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError, match=r"prefill='rows' runs on engine='eager' only"):
        HFTokenModel(*weights, engine="static", prefill="rows")
    assert HFTokenModel(*weights, engine="static").prefill_kind == "padded"


def test_from_pretrained_refuses_before_loading(tmp_path: Any) -> None:
    """The check runs before transformers reads the (here missing) folder."""
    missing = str(tmp_path / "no-model")
    with pytest.raises(ValueError, match=r"prefill must be one of"):
        HFTokenModel.from_pretrained(missing, prefill="row")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"prefill='rows' runs on engine='eager' only"):
        HFTextModel.from_pretrained(missing, engine="static", prefill="rows")


def test_from_pretrained_passes_it_on() -> None:
    from dprag_core.eval.workbench import reader_path

    loaded = HFTextModel.from_pretrained(str(reader_path()), prefill="rows")
    assert loaded.token_model.prefill_kind == "rows"
    assert HFTokenModel.from_pretrained(str(reader_path())).prefill_kind == "padded"
