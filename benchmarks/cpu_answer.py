"""Seconds per 40-voter DPAnswerVote answer of SmolLM2-135M-Instruct on this CPU.

Each treatment question with 16+ records of a synthetic world (real drug names;
by default ``make_corpus``'s 20 diseases with supports up to 20, where one
question has 16+ records; ``--diseases 40 --max-support 100`` is the
evaluation's world, with six) is answered through
``PrivateRAG`` with DPAnswerVote (m = 40 voters, k = 1, ε = 5, the reader's
prompts and answer length), the model in float32, by the eager engine with each
prefill (``--prefills``, default all three), side by side in one process:

- ``padded``: one batched forward over the public B x ``prompt_width`` layout
  (:func:`~dprag_core.models.hf_cache.prefill_padded`, the default on every
  device and thread count: its work does not follow the rows' token counts);
- ``rows``: each row prefilled alone, one forward per row
  (:func:`~dprag_core.models.hf_cache.prefill_rows`), every token computed;
- ``prefix``: the same, the tokens a row shares with the public shared prefix
  (the chat template's head and the template's text before its records,
  :class:`~dprag_core.models.hf_cache.SharedPrefix`) computed once: what
  ``prefill="rows"`` runs (its time follows the rows' token counts).

The paths alternate question by question (same prompts, same seeds), so a
change in the machine's load falls on all. It prints, per path, the median wall
seconds and CPU seconds per answer, their ratios, whether all released the same
answers, the load average around the run, and the CPU's bf16 factor: the CPU
time of one 64x576x1536 matrix product in bfloat16 over float32
(``dprag_core.models.hf.cpu_has_native_bf16`` decides which dtype a CPU load gets).

    .venv/bin/python benchmarks/cpu_answer.py --threads 1   # one question, one torch thread
    .venv/bin/python benchmarks/cpu_answer.py --threads 2 --prefills padded   # the default
    .venv/bin/python benchmarks/cpu_answer.py --threads 2 --prefills padded --prompt-width 128
    .venv/bin/python benchmarks/cpu_answer.py --threads 2 --diseases 40 --max-support 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

from dprag_core.algorithms.answer_vote import DPAnswerVote  # noqa: E402
from dprag_core.eval.readers import READERS, load_reader  # noqa: E402
from dprag_core.eval.synthetic import make_corpus  # noqa: E402
from dprag_core.eval.workbench import CorpusIndex  # noqa: E402
from dprag_core.models.hf import ENGINES, HFTokenModel, cpu_has_native_bf16  # noqa: E402
from dprag_core.models.hf_cache import DynamicBackend, SharedPrefix  # noqa: E402
from dprag_core.pipeline import PrivateRAG  # noqa: E402

sys.path[:0] = [str(ROOT / "benchmarks")]
from _mechanisms import answer_key_of, per_answer_budget  # noqa: E402

#: The prefills timed, by name: (each row alone, with the model's shared prefix).
PATHS = {"padded": (False, False), "rows": (True, False), "prefix": (True, True)}


def with_backend(model: HFTokenModel, rows: bool, prefix: SharedPrefix | None) -> None:
    """Make ``model``'s sessions prefill each row alone (``rows``), with ``prefix``."""
    model._spec = replace(
        ENGINES["eager"],
        backend=lambda owner: DynamicBackend(owner._call, owner.device, rows=rows, prefix=prefix),
    )


def bf16_factor(repeats: int = 20) -> float:
    """CPU time of a 64x576x1536 bf16 matrix product over the float32 one."""
    x, w = torch.randn(64, 576), torch.randn(576, 1536)
    took = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = x.to(dtype), w.to(dtype)
        a @ b
        start = time.process_time()
        for _ in range(repeats):
            a @ b
        took[dtype] = time.process_time() - start
    return took[torch.bfloat16] / took[torch.float32]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=4, help="questions timed (per path)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--voters", type=int, default=40)
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0, help="corpus seed")
    ap.add_argument("--diseases", type=int, default=20, help="make_corpus's n_diseases")
    ap.add_argument("--max-support", type=int, default=20, help="make_corpus's max_support")
    ap.add_argument(
        "--prefills", nargs="+", choices=sorted(PATHS), default=list(PATHS), help="paths timed"
    )
    ap.add_argument(
        "--prompt-width",
        type=int,
        default=None,
        help="the public width of every row (default: the engine's, 256)",
    )
    args = ap.parse_args()
    if args.prompt_width is not None and args.prompt_width < 1:
        ap.error("--prompt-width must be an integer >= 1")
    torch.set_num_threads(args.threads)
    reader = READERS["smollm2"]
    token_model, text_model = load_reader(
        "smollm2", dtype="float32", prompt_width=args.prompt_width
    )
    corpus = make_corpus(
        n_diseases=args.diseases, max_support=args.max_support, seed=args.seed, real_treatments=True
    )
    items = [q for q in corpus.questions_of("treatment") if q.support >= 16][: args.questions]
    index = CorpusIndex.build(corpus)
    mech = DPAnswerVote(
        text_model,
        m=args.voters,
        k=1,
        epsilon=args.epsilon,
        delta=1e-4,
        max_new_tokens=reader.max_new_tokens,
        key=answer_key_of(reader),
        **reader.voting_prompts(),
    )
    app = PrivateRAG(mech, index, accountant=per_answer_budget())
    paths = {
        name: (rows, token_model._prefix if shared else None)
        for name, (rows, shared) in PATHS.items()
        if name in args.prefills
    }
    wall: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    answers: dict[str, list[Any]] = {name: [] for name in paths}
    loads = [os.getloadavg()[0]]
    for i, item in enumerate(items):
        for name, (rows, prefix) in paths.items():
            with_backend(token_model, rows, prefix)
            start, start_cpu = time.perf_counter(), time.process_time()
            answer = app.answer(item.question, rng=args.seed + i)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            answers[name].append(answer.text)
            print(
                f"  {item.question[:48]!r} {name}: {wall[name][-1]:.1f} s, "
                f"{cpu[name][-1]:.1f} CPU-s",
                flush=True,
            )
        loads.append(os.getloadavg()[0])
    med = {name: statistics.median(wall[name]) for name in paths}
    med_cpu = {name: statistics.median(cpu[name]) for name in paths}
    print(
        f"SmolLM2-135M-Instruct float32, DPAnswerVote m={args.voters} eps={args.epsilon:g}, "
        f"{len(items)} questions, prompt_width {token_model.prompt_width}, "
        f"{args.threads} torch threads, {os.cpu_count()} CPUs, "
        f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {cpu_has_native_bf16()}; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    for name in paths:
        print(
            f"{name:>7} prefill: {med[name]:.1f} s per answer (median wall), "
            f"{med_cpu[name]:.1f} CPU-s per answer{' (the default)' if name == 'padded' else ''}"
        )
    ratios = [
        f"{a} / {b}: {med[a] / med[b]:.3f} wall, {med_cpu[a] / med_cpu[b]:.3f} CPU"
        for a, b in (("padded", "rows"), ("prefix", "rows"))
        if a in paths and b in paths
    ]
    same = all(answers[name] == answers[next(iter(paths))] for name in paths)
    print("; ".join([*ratios, f"same answers: {same}"]))
    print(f"bf16 / float32 CPU time of one 64x576x1536 product: {bf16_factor():.1f}x")


if __name__ == "__main__":
    main()
