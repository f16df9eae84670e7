"""Time per generated token: DPSparseVote vs HF greedy generate vs a re-encode loop.

The three run on the same m+1 prompts (m voters with one document each, plus the
public prompt) for the same number of tokens, side by side in one process:

- ``dp``: DPSparseVote (exponential selection, a budget large enough that no stop
  comes from the budget, EOS ignored by a wrapper) on HFTokenModel: one batched
  prefill, then one [m+1, 1] KV-cached step per token.
- ``generate``: the physical limit, ``model.generate`` greedy with cache on the same
  left-padded batch (every row its own argmax; no EOS stop).
- ``reencode``: the reference-code pattern: each token re-encodes every full prefix
  (prompt + answer so far) in one batched forward without cache. With
  ``--reencode-sample S`` only S evenly spaced steps are timed and the others are
  interpolated linearly (its cost grows linearly with the prefix); S = tokens
  times every step.

Prefill is timed separately, so both the total and the decode-only per-token
times are printed. Models are random-initialised from configs (no downloads):
``tiny`` (GPT-2 sized for tests) and ``llama100m`` (~95M parameters, vocab 32000).
CPU contention from other processes changes absolute times, much less the ratios.

Run:  nice .venv/bin/python benchmarks/decode.py --model llama100m --tokens 48 --m 40
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny_models import build_model, build_tokenizer

from dprag_core.algorithms import DPSparseVote
from dprag_core.models.hf import HFTokenModel, HFTokenSession
from dprag_core.retrieval import ScoredDocument

WORDS = [
    "patient",
    "alice",
    "martin",
    "was",
    "diagnosed",
    "with",
    "migraine",
    "and",
    "treated",
    "with",
    "aspirin",
    "bob",
    "durand",
    "has",
    "asthma",
    "his",
    "doctor",
    "prescribed",
    "salbutamol",
    "twice",
    "a",
    "day",
    "the",
    "fever",
    "decreased",
    "after",
    "paracetamol",
    "chloe",
    "takes",
    "metformin",
    "every",
    "morning",
    "for",
    "diabetes",
]


class BenchModel:
    """Wraps an HFTokenModel: no EOS (fixed-length runs) and a timed prefill."""

    def __init__(self, inner: HFTokenModel) -> None:
        self.inner = inner
        self.prefill_seconds = 0.0
        self.rows: list[list[int]] = []

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset()

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: Any) -> str:
        return self.inner.decode(ids)

    def prefill(self, prompts: list[str]) -> HFTokenSession:
        self.rows = [self.inner.prompt_ids(p) for p in prompts]
        start = time.perf_counter()
        session = self.inner.prefill(prompts)
        self.prefill_seconds = time.perf_counter() - start
        return session


def build(size: str, tok: Any) -> Any:
    if size == "tiny":
        return build_model("llama", tok, hidden=64, layers=2)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=10,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )
    return LlamaForCausalLM(config).eval()


def documents(m: int, chars: int, rng: np.random.Generator) -> list[ScoredDocument]:
    docs = []
    for i in range(m):
        text = ""
        while len(text) < chars:
            text += " " + str(rng.choice(WORDS))
        docs.append(ScoredDocument(id=f"d{i}", text=text.strip(), score=1.0 - i / (2 * m)))
    return docs


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids, mask


def time_generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, n: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            do_sample=False,
            top_k=None,
            top_p=None,
            temperature=None,
            eos_token_id=None,
            pad_token_id=int(model.config.pad_token_id),
            use_cache=True,
        )
    return time.perf_counter() - start


def time_reencode_step(model: Any, rows: list[list[int]], answer: list[int], pad: int) -> float:
    ids, mask = left_pad([r + answer for r in rows], pad)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    start = time.perf_counter()
    with torch.inference_mode():
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False
        ).logits[:, -1, :]
        torch.log_softmax(logits.float(), dim=-1).argmax(dim=-1)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["tiny", "llama100m", "both"], default="both")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--m", type=int, default=40)
    parser.add_argument("--doc-chars", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reencode-sample", type=int, default=0, help="0 = every step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    sizes = ["tiny", "llama100m"] if args.model == "both" else [args.model]
    n, m = args.tokens, args.m
    for size in sizes:
        model = build(size, tok)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        bench = BenchModel(HFTokenModel(model, tok))
        docs = documents(m, args.doc_chars, np.random.default_rng(0))
        mech = DPSparseVote(
            bench,
            m=m,
            k=1,
            epsilon=1e4,
            delta=0.0,
            epsilon_token=1.0,
            selection="exponential",
            max_new_tokens=n,
        )
        question = "Which treatment did Alice Martin receive?"
        mech.answer(question, docs[:m], rng=0)  # warm-up (allocator, kernels)
        start = time.perf_counter()
        result = mech.answer(question, docs[:m], rng=1)
        dp_total = time.perf_counter() - start
        dp_prefill = bench.prefill_seconds
        generated = int(result.details["tokens_generated"])
        assert generated == n, result.details
        rows = bench.rows
        ids, mask = left_pad(rows, bench.inner.pad_token_id)

        time_generate(model, ids, mask, 2)  # warm-up
        gen_first = time_generate(model, ids, mask, 1)
        gen_total = time_generate(model, ids, mask, n)

        answer = [int(x) for x in np.random.default_rng(2).integers(0, len(tok), n)]
        sample = n if args.reencode_sample <= 0 else min(n, args.reencode_sample)
        steps = sorted({round(x) for x in np.linspace(0, n - 1, sample)})
        timed = [
            time_reencode_step(model, rows, answer[:t], bench.inner.pad_token_id) for t in steps
        ]
        re_total = float(np.sum(np.interp(np.arange(n), steps, timed)))

        dp_tok, gen_tok, re_tok = dp_total / n, gen_total / n, re_total / n
        dp_dec = (dp_total - dp_prefill) / (n - 1)
        gen_dec = (gen_total - gen_first) / (n - 1)
        print(
            f"\n== {size}: {params:.1f}M params, m={m} (+1 public row), {n} tokens, "
            f"prompt tokens {min(map(len, rows))}-{max(map(len, rows))}, "
            f"threads={args.threads}, reencode steps timed {len(steps)}/{n}"
        )
        print(f"{'':18}{'total s':>9}{'per token ms':>14}{'decode-only ms/token':>22}")
        print(f"{'DPSparseVote':18}{dp_total:9.2f}{1e3 * dp_tok:14.1f}{1e3 * dp_dec:22.1f}")
        print(f"{'HF generate':18}{gen_total:9.2f}{1e3 * gen_tok:14.1f}{1e3 * gen_dec:22.1f}")
        print(f"{'re-encode loop':18}{re_total:9.2f}{1e3 * re_tok:14.1f}{'':>22}")
        print(
            f"ratios: DPSparseVote / generate = {dp_tok / gen_tok:.2f} per token "
            f"({dp_dec / gen_dec:.2f} decode-only); re-encode / DPSparseVote = "
            f"{re_tok / dp_tok:.1f}x; private tokens {result.details['private_tokens']}"
        )


if __name__ == "__main__":
    main()
