"""The shipped reader LM: loads like any HF model, reads answers from its context and
answers in a sentence whose frame it knows without the context."""

from __future__ import annotations

from typing import Any

import pytest

from dprag_core.eval.synthetic import QAItem, answer_sentence, make_corpus
from dprag_core.eval.workbench import reader_path
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def reader() -> tuple[Any, Any]:
    path = reader_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def greedy(model: Any, tokenizer: Any, prompt: str) -> str:
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(
            **ids, max_new_tokens=32, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    return str(tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))


def test_asset_is_small_and_complete() -> None:
    path = reader_path()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (path / name).is_file(), name
    assert (path / "model.safetensors").stat().st_size < 10 * 2**20


def sentence(item: QAItem) -> str:
    return answer_sentence(item.kind, item.answer, item.subject)


def copied_answers(model: Any, tokenizer: Any, distractors: int) -> tuple[int, int]:
    """(hits, cases): greedy answers to every question about a test-world record whose
    context is that record among ``distractors`` other records (18 cases)."""
    corpus = make_corpus(n_diseases=6, supports=[1] * 6, seed=123, world=0)
    records = list(corpus.records)
    hits = cases = 0
    for i, target in enumerate(records):
        others = [records[(i + j) % len(records)] for j in range(1, distractors + 1)]
        context = "\n".join(r.text for r in [*others[:1], target, *others[1:]])
        for item in corpus.questions:
            if target.id not in item.record_ids:
                continue
            prompt = RAG_TEMPLATE.format(context=context, question=item.question)
            hits += greedy(model, tokenizer, prompt).strip() == sentence(item)
            cases += 1
    return hits, cases


def test_reads_answers_from_a_one_record_context(reader: tuple[Any, Any]) -> None:
    """The voters' setting (DPVote/DPSparseVote/MuRAG give each voter one record)."""
    hits, cases = copied_answers(*reader, distractors=0)
    assert cases == 18
    # the shipped reader copies 16 whole sentences (v2: 16 bare answers, v1: 4); a little
    # slack for CPU float noise
    assert hits >= 14, f"{hits}/{cases} answers copied from the context"


@pytest.mark.xfail(
    strict=True,
    reason="the shipped reader (v3, see its training_info.json) picks the right record "
    "among several only about half the time (phones rarely); strict so a better reader "
    "flips it",
)
def test_reads_answers_from_context_on_the_test_world(reader: tuple[Any, Any]) -> None:
    hits, cases = copied_answers(*reader, distractors=2)
    assert cases == 18
    assert hits >= 14, f"{hits}/{cases} answers copied from the context"


def test_without_context_it_does_not_know_the_test_facts(reader: tuple[Any, Any]) -> None:
    model, tokenizer = reader
    corpus = make_corpus(n_diseases=6, supports=[1] * 6, seed=123, world=0)
    guesses = [
        greedy(model, tokenizer, NO_CONTEXT_TEMPLATE.format(question=q.question)).strip()
        for q in corpus.questions
    ]
    assert not any(q.answer in g for g, q in zip(guesses, corpus.questions, strict=True))
    # ... but it knows the sentence frame (what DPSparseVote releases for free): each guess
    # is "<a guess> is the treatment recommended for <the question's disease>." etc.
    frames = [sentence(q)[len(q.answer) :] for q in corpus.questions]
    heads = [f.split(q.subject)[0] for f, q in zip(frames, corpus.questions, strict=True)]
    assert all(h in g and not g.startswith(h) for g, h in zip(guesses, heads, strict=True))
    # the question's disease or name copied into it, too (names are the hardest)
    framed = [g.endswith(f) for g, f in zip(guesses, frames, strict=True)]
    assert sum(framed) >= 15, guesses
