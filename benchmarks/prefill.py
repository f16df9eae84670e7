"""Per-row prefill vs the padded batched prefill, on the reader: cost and greedy tokens.

Every session is laid out in the public shape B x ``prompt_width`` (batch
invariance, ``dprag_core/models/hf.py``). The eager backend fills it by one
batched forward over B x ``prompt_width`` positions
(:func:`~dprag_core.models.hf_cache.prefill_padded`, the default: the same work
whatever the rows hold) or, with ``prefill="rows"``, by prefilling each row
alone (:func:`~dprag_core.models.hf_cache.prefill_rows`: the rows' real tokens,
so its time follows their token counts); here each runs on the same rows. Both
then decode batched over the same public shape. For each question of the
README corpus and of the default synthetic corpus, B = m voters (one record
each, the question's own disease first, as a retriever ranks them) + the public
row; this prints, side by side:

- prefill time and decode time per token (each row fed its own greedy token,
  ``--tokens`` steps) of both, and their ratios (median over questions and
  ``--repeats``, interleaved; ``--clock cpu`` is the process's CPU time, fair
  on a shared CPU);
- correctness: the largest first-logit difference between the two (last-bit
  rounding only) and how many of the rows' greedy tokens differ (all rows, all
  steps, all questions).

Measured on a quiet machine, the default width 256, 40 voters + the public
row, longest row 84 tokens: ``--threads 1 --clock cpu``: prefill 152.2 -> 72.1
ms (0.474x), decode 5.12 -> 4.69 ms per token; ``--threads 2 --clock wall``:
prefill 85.7 -> 61.2 ms (0.714x), decode 3.82 -> 3.46 ms. First logits within
2.69e-5, 0 of 30592 greedy tokens differ. (Under load ~11 with two threads the
per-row prefill had been 2.5x slower: 41 small forwards wait at every kernel's
thread barrier for a descheduled thread.) A GPU was not measured.

Run: nice .venv/bin/python benchmarks/prefill.py --clock cpu --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

from dprag_core.eval.synthetic import SyntheticCorpus, make_corpus  # noqa: E402
from dprag_core.eval.workbench import load_models  # noqa: E402
from dprag_core.models.hf import HFTokenModel, _left_pad  # noqa: E402
from dprag_core.models.hf_cache import DynamicBackend  # noqa: E402
from dprag_core.prompts import NO_CONTEXT_TEMPLATE, RAG_TEMPLATE  # noqa: E402

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def prompts(corpus: SyntheticCorpus, question: str, subject: str, m: int) -> list[str]:
    """m voter prompts (one record each, ``subject``'s records first) and the public one."""
    records = sorted(corpus.records, key=lambda r: r.disease != subject)[:m]
    rows = [RAG_TEMPLATE.format(context=r.text, question=question) for r in records]
    return [*rows, NO_CONTEXT_TEMPLATE.format(question=question)]


def run(
    backend: DynamicBackend, ids: torch.Tensor, mask: torch.Tensor, steps: int, vocab: int
) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """Prefill and ``steps`` own-greedy decode steps: times, first logits, the tokens [B, steps]."""
    clock = CLOCKS[ARGS.clock]
    start = clock()
    first = backend.prefill(ids, mask)[:, :vocab].clone()
    middle = clock()
    tokens, logits = [], first
    for _ in range(steps):
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
        logits = backend.append(token)[:, :vocab]
    end = clock()
    return middle - start, (end - middle) / steps, first, torch.cat(tokens, dim=1)


def main() -> None:
    torch.set_num_threads(ARGS.threads)
    model: HFTokenModel = load_models()[0]
    vocab, width = model.vocab_size, model.prompt_width
    corpora = [make_corpus(n_diseases=4, max_support=16, seed=0), make_corpus(seed=0)]
    cases = [(c, q.question, q.subject) for c in corpora for q in c.questions if q.kind != "phone"]
    times: dict[str, list[float]] = {"padded": [], "rows": [], "padded/t": [], "rows/t": []}
    worst, differ, total, longest = 0.0, 0, 0, 0
    for index, (corpus, question, subject) in enumerate(cases):
        rows = model.prompt_rows(prompts(corpus, question, subject, ARGS.m))
        longest = max(longest, *map(len, rows))
        ids, mask = _left_pad(rows, model.pad_token_id, model.device, width)
        timed = index < ARGS.timed
        for _ in range(ARGS.repeats if timed else 1):
            out = {}
            for name in ("padded", "rows"):
                backend = DynamicBackend(model._call, model.device, rows=name == "rows")
                out[name] = run(backend, ids, mask, ARGS.tokens, vocab)
                if timed:
                    times[name].append(out[name][0])
                    times[name + "/t"].append(out[name][1])
        worst = max(worst, float((out["padded"][2] - out["rows"][2]).abs().max()))
        differ += int((out["padded"][3] != out["rows"][3]).sum())
        total += out["rows"][3].numel()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"reader, B = {ARGS.m} voters + public, prompt_width {width}, longest row {longest} "
        f"tokens, {ARGS.threads} threads, {ARGS.clock} clock; median of {ARGS.timed} "
        f"questions x {ARGS.repeats} repeats"
    )
    print(f"{'':24}{'padded batched':>16}{'per-row':>12}{'per-row / padded':>20}")
    print(
        f"{'prefill (ms)':24}{med['padded'] * 1e3:16.1f}{med['rows'] * 1e3:12.1f}"
        f"{med['rows'] / med['padded']:20.3f}"
    )
    print(
        f"{'decode per token (ms)':24}{med['padded/t'] * 1e3:16.2f}{med['rows/t'] * 1e3:12.2f}"
        f"{med['rows/t'] / med['padded/t']:20.3f}"
    )
    print(
        f"{len(cases)} questions: first logits differ by at most {worst:.2e}; "
        f"greedy tokens differing: {differ} of {total} ({ARGS.tokens} steps, every row)"
    )


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--m", type=int, default=40, help="voters (B = m + 1)")
parser.add_argument("--tokens", type=int, default=16, help="decode steps per question")
parser.add_argument("--timed", type=int, default=5, help="questions timed (the rest: checked)")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
ARGS = parser.parse_args()

if __name__ == "__main__":
    main()
