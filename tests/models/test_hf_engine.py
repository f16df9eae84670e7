"""The KV-cached token engine: exact against uncached forwards, padding, chat templates."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch

from dprag_core.models import LogprobModel, LogprobSession, TextModel, TokenModel, TokenSession
from dprag_core.models.hf import HFTextModel, HFTokenModel

PROMPTS = [
    "Alice",
    "Question: What disease does Bob Durand have?\nAnswer:",
    "Context: Chloé takes metformin.",
]


def _uncached_logprobs(model: Any, ids: list[int], real_vocab: int) -> np.ndarray:
    """Log-probabilities over the real tokens (padded logit rows are not tokens)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
        return torch.log_softmax(logits[:real_vocab], dim=-1).numpy()


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_cached_matches_uncached(kind: str, tiny_hf_models: dict[str, Any], tiny_tokenizer: Any):
    model = tiny_hf_models[kind]
    tm = HFTokenModel(model, tiny_tokenizer)
    session = tm.prefill(PROMPTS)
    rows = [tm.prompt_ids(p) for p in PROMPTS]
    assert len({len(r) for r in rows}) == len(rows)  # really different lengths
    real = len(tiny_tokenizer)
    for step in range(4):
        lp = session.logprobs
        assert lp.shape == (len(PROMPTS), tm.vocab_size)
        assert lp.dtype == np.float32
        for i, ids in enumerate(rows):
            ref = _uncached_logprobs(model, ids, real)
            np.testing.assert_allclose(lp[i], ref, atol=1e-4, rtol=0)
            assert session.greedy()[i] == int(np.argmax(ref))
        token = int(session.greedy()[step % len(PROMPTS)])
        rows = [[*r, token] for r in rows]
        session.step(token)


def test_padded_vocab_rows_are_not_tokens(tiny_tokenizer: Any):
    from tiny_models import build_model

    model = build_model("llama", tiny_tokenizer)  # own copy: its weights are edited below
    assert model.get_output_embeddings().weight.shape[0] == len(tiny_tokenizer) + 7
    tm = HFTokenModel(model, tiny_tokenizer)
    assert tm.vocab_size == len(tiny_tokenizer)
    with torch.no_grad():  # make a padded row the largest logit: it must still never win
        model.get_output_embeddings().weight[-1] *= 0
        model.get_output_embeddings().weight[-1, 0] = 1e4
    session = tm.prefill(["Alice", "Bob"])
    with torch.inference_mode():  # the padded row really is the model's argmax
        raw = model(input_ids=torch.tensor([tm.prompt_ids("Alice")])).logits[0, -1]
    assert int(raw.argmax()) == len(tiny_tokenizer) + 6
    lp = session.logprobs
    assert lp.shape == (2, len(tiny_tokenizer))
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, atol=1e-5)
    assert np.all(session.greedy() < len(tiny_tokenizer))
    np.testing.assert_array_equal(session.greedy(), lp.argmax(axis=1))


def test_logprobs_are_copied_only_when_read(tiny_token_model: Any, monkeypatch: Any):
    """Voting reads B greedy ids per step: the [B, V] rows never leave the device unless read."""
    session = tiny_token_model.prefill(PROMPTS)
    calls: list[int] = []
    original = torch.log_softmax
    monkeypatch.setattr(torch, "log_softmax", lambda *a, **k: calls.append(1) or original(*a, **k))
    for _ in range(3):
        session.step(int(session.greedy()[0]))
    assert calls == []
    first = session.logprobs
    assert session.logprobs is first and len(calls) == 1


def test_chat_template_is_applied(tiny_chat_token_model: Any, tiny_chat_tokenizer: Any):
    ids = tiny_chat_token_model.prompt_ids("hello")
    text = tiny_chat_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\nhello<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    session = tiny_chat_token_model.prefill(["hello", "a longer question here"])
    model = tiny_chat_token_model.model
    ref = _uncached_logprobs(model, ids, len(tiny_chat_tokenizer))
    np.testing.assert_allclose(session.logprobs[0], ref, atol=1e-4, rtol=0)


def test_plain_prompt_used_verbatim(tiny_token_model: Any, tiny_tokenizer: Any):
    assert tiny_token_model.prompt_ids("Alice has") == tiny_tokenizer.encode("Alice has")


def test_protocols_and_basic_api(tiny_token_model: Any, tiny_text_model: Any):
    assert isinstance(tiny_token_model, TokenModel)
    assert isinstance(tiny_text_model, TextModel)
    assert isinstance(tiny_token_model, LogprobModel)
    session = tiny_token_model.prefill(["Alice"])
    assert isinstance(session, TokenSession) and isinstance(session, LogprobSession)
    assert tiny_token_model.decode(tiny_token_model.encode("aspirin")) == "aspirin"
    assert tiny_token_model.eos_token_ids == frozenset({1})


def test_bad_input(tiny_token_model: Any):
    with pytest.raises(ValueError, match="at least one prompt"):
        tiny_token_model.prefill([])
    with pytest.raises(TypeError, match="not a single string"):
        tiny_token_model.prefill("Alice")
    with pytest.raises(ValueError, match="token must be in"):
        tiny_token_model.prefill(["Alice"]).step(10**6)
    with pytest.raises(ValueError, match="dtype"):
        HFTokenModel.from_pretrained("unused", dtype="float16")  # type: ignore[arg-type]


def test_text_model_matches_token_loop(tiny_text_model: Any, tiny_hf_models: dict[str, Any]):
    prompts = ["Alice", "Question: What disease does Bob Durand have?\nAnswer:"]
    texts = tiny_text_model.generate(prompts, max_new_tokens=6)
    tm = tiny_text_model.token_model
    for prompt, text in zip(prompts, texts, strict=True):
        session = tm.prefill([prompt])
        ids: list[int] = []
        for _ in range(6):
            tok = int(session.logprobs[0].argmax())
            assert tok == int(session.greedy()[0])
            if tok in tm.eos_token_ids:
                break
            ids.append(tok)
            session.step(tok)
        assert text == tm.decode_answer(ids)  # no trailing partial UTF-8 character


def test_text_model_equals_hf_greedy_generate(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any):
    model = tiny_hf_models["qwen2"]
    ours = HFTextModel(model, tiny_tokenizer).generate(["Bob Durand"], max_new_tokens=8)
    ids = torch.tensor([tiny_tokenizer.encode("Bob Durand")])
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            top_k=None,
            top_p=None,
            temperature=None,
        )
    ref = tiny_tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert ours == [ref.replace("\ufffd", "")]  # invalid bytes are cut (codec.complete_text)


def test_bfloat16_runs(tiny_tokenizer: Any):
    from tiny_models import build_model

    tm = HFTokenModel(build_model("llama", tiny_tokenizer, dtype=torch.bfloat16), tiny_tokenizer)
    session = tm.prefill(PROMPTS)
    session.step(5)
    lp = session.logprobs
    assert lp.dtype == np.float32 and np.all(np.isfinite(lp))
    np.testing.assert_array_equal(session.greedy(), lp.argmax(axis=1))


def test_import_models_is_light():
    code = "import sys, dprag_core.models; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_engine_matches_cpu(tiny_tokenizer: Any):
    """On the GPU: the same greedy tokens and log-probabilities as on the CPU, and
    HFTextModel.generate equal to model.generate (the loop stays on the device)."""
    from tiny_models import build_model

    cpu = HFTokenModel(build_model("llama", tiny_tokenizer), tiny_tokenizer)
    gpu_model = build_model("llama", tiny_tokenizer).to("cuda")
    gpu = HFTokenModel(gpu_model, tiny_tokenizer)
    s_cpu, s_gpu = cpu.prefill(PROMPTS), gpu.prefill(PROMPTS)
    for _ in range(3):
        np.testing.assert_allclose(s_gpu.logprobs, s_cpu.logprobs, atol=1e-3, rtol=0)
        np.testing.assert_array_equal(s_gpu.greedy(), s_cpu.greedy())
        token = int(s_cpu.greedy()[0])
        s_cpu.step(token)
        s_gpu.step(token)
    texts = HFTextModel(gpu_model, tiny_tokenizer).generate(PROMPTS[:1], max_new_tokens=6)
    ids = torch.tensor([tiny_tokenizer.encode(PROMPTS[0])], device="cuda")
    with torch.inference_mode():
        out = gpu_model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            top_k=None,
            top_p=None,
            temperature=None,
        )
    assert texts == [tiny_tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)]


def test_a_completion_stopped_at_the_token_limit_is_cut_text(tiny_text_model: Any) -> None:
    """A row that reaches max_new_tokens without an end token is a CutText (answer keys drop
    its last, cut word); a row whose first token is an end token is not."""
    from dprag_core.models.cut import was_cut

    model = tiny_text_model.token_model
    prompts = ["Question: who?\nAnswer:", "Context: x\n\nQuestion: what?\nAnswer:"]
    session = model.prefill(prompts)
    first = [int(t) for t in session.greedy()]
    for prompt, token in zip(prompts, first, strict=True):
        (text,) = tiny_text_model.generate([prompt], max_new_tokens=1)
        assert was_cut(text) == (token not in model.eos_token_ids)


def test_generate_takes_max_new_tokens_steps_whatever_the_rows_write(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, monkeypatch: Any
) -> None:
    """Every row ending at its first token (every id an end id) or none ending: the same
    number of decode steps, max_new_tokens (how long a private generation takes does not
    follow what it writes)."""
    from dprag_core.models.hf import HFTextModel, HFTokenModel

    plain = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer)
    ending = HFTokenModel(
        tiny_hf_models["llama"], tiny_tokenizer, eos_token_ids=range(plain.vocab_size)
    )
    steps: list[int] = []
    session_class = type(plain.prefill(["q"]))
    step_rows = session_class.step_rows

    def counted(self: Any, ids: Any) -> None:
        steps.append(1)
        step_rows(self, ids)

    monkeypatch.setattr(session_class, "step_rows", counted)
    counts = []
    for model in (plain, ending):
        steps.clear()
        texts = HFTextModel.on(model).generate(["Question: who?\nAnswer:", "a b"], max_new_tokens=5)
        counts.append(len(steps))
    assert texts == ["", ""] and counts == [4, 4]  # 5 tokens: 4 steps after the prefill's
