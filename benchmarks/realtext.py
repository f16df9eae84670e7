"""The real-text track: real passages and questions (the allennlp 0.9.0 test fixtures), offline.

``dprag_core.eval.realtext`` downloads the ``allennlp==0.9.0`` wheel once with pip
(sha256-pinned, cached), chunks its SQuAD, Quoref, DROP and TriviaQA passages and
pages into records (one privacy unit each), and keeps the 37 questions with their
gold answers. This script indexes the records (MiniLM, FAISS), answers every
question with each row through ``PrivateRAG`` (SmolLM2-135M-Instruct by default,
its prompts), and reports per row: match accuracy (a gold answer or alias in the
answer), where the answers came from (``details["answer_source"]``: documents,
model alone, none) and how they ended; per question: how many records hold a gold
answer, how many of those the m voters read, and LimitedDomain's bar at this
epsilon — the votes an answer needs before any DP voting mechanism can release it.

    .venv/bin/python benchmarks/realtext.py                 # SmolLM2, eps 5, m = 20
    .venv/bin/python benchmarks/realtext.py --quick         # 9 questions, m = 6 (a smoke run)

The track's limits: 37 questions, 15 of them counts that must be computed, and
most answers held by one to four records — what a DP mechanism must not release.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from _mechanisms import MemoTextModel, dp_mechanisms, per_answer_budget
from tqdm import tqdm

from dprag_core.algorithms.answer_vote import AnswerVote
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG
from dprag_core.eval.embeddings import MiniLMEmbedder
from dprag_core.eval.metrics import match
from dprag_core.eval.readers import READERS, load_reader
from dprag_core.eval.realtext import RealQuestion, RealTextTrack, load
from dprag_core.eval.workbench import CorpusIndex
from dprag_core.pipeline import PrivateRAG

ROOT = Path(__file__).resolve().parents[1]
DP_ROWS = ("DPAnswerVote", "DP-KSA", "DPSparseVote (LD, words)")


def matched(text: str, question: RealQuestion) -> bool:
    """Whether ``text`` contains one of the question's gold answers."""
    return any(match(text, gold) == 1.0 for gold in question.answers)


def answer_all(
    mech: Mechanism, index: CorpusIndex, questions: Sequence[RealQuestion], seed: int
) -> list[dict[str, Any]]:
    """Each question through PrivateRAG: match, where the answer came from, how it ended."""
    app = PrivateRAG(mech, index, accountant=per_answer_budget())
    rows = []
    for i, q in enumerate(questions):
        answer = app.answer(q.question, rng=seed + i)
        rows.append(
            {
                "match": matched(answer.text, q),
                "source": str(answer.details.get("answer_source", "-")),
                "stop": str(answer.details.get("stop_reason", "-")),
                "text": " ".join(answer.text.split())[:60].replace("|", "/"),
            }
        )
    return rows


def support_lines(
    questions: Sequence[RealQuestion], index: CorpusIndex, *, m: int, bar: float
) -> list[str]:
    """Per question: records holding a gold answer, those among the m voters', releasable?"""
    lines = [
        "| dataset | question | gold | records holding it | read by the m voters |",
        "|---|---|---|---|---|",
    ]
    possible = 0
    for q in questions:
        read = len({d.id for d in index(q.question, m)} & set(q.record_ids))
        possible += read > bar
        gold = q.answer if q.support else f"{q.answer} (computed)"
        lines.append(f"| {q.dataset} | {q.question[:60]} | {gold} | {q.support} | {read} |")
    held = sum(q.support > bar for q in questions)
    return [
        f"Questions whose gold answer more than h⊥ = {bar:.1f} records hold: {held} of "
        f"{len(questions)}; with more than h⊥ of them among the {m} voters' records: "
        f"{possible} (no DP voting mechanism can release the others at this epsilon, "
        "whatever the model).",
        "",
        *lines,
    ]


def counts(values: Sequence[str]) -> str:
    """``documents 3, model 1``: how often each value occurs, sorted by value."""
    return ", ".join(f"{k} {v}" for k, v in sorted(Counter(values).items()))


def table(
    results: Mapping[str, list[dict[str, Any]]], questions: Sequence[RealQuestion]
) -> list[str]:
    """One line per row: match overall and per dataset, answer sources, stop reasons."""
    datasets = sorted({q.dataset for q in questions})
    head = " | ".join(f"{d} ({sum(q.dataset == d for q in questions)})" for d in datasets)
    lines = [
        f"| row | match | {head} | answer source | stop reasons |",
        "|---|---|" + "---|" * len(datasets) + "---|---|",
    ]
    for name, rows in results.items():
        pairs = list(zip(rows, questions, strict=True))
        per = " | ".join(
            f"{np.mean([r['match'] for r, q in pairs if q.dataset == d]):.2f}" for d in datasets
        )
        sources = counts([r["source"] for r in rows])
        stops = counts([r["stop"] for r in rows])
        mean = np.mean([r["match"] for r in rows])
        lines.append(f"| {name} | {mean:.2f} | {per} | {sources} | {stops} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reader", choices=sorted(READERS), default="smollm2")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--delta", type=float, default=1e-4)
    ap.add_argument("--voters", type=int, default=20, help="m voters (k = 1) / KSA responses")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick", action="store_true", help="SQuAD and Quoref only, m = 6 (a smoke run)"
    )
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME", help="rows to run")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "realtext")
    args = ap.parse_args(argv)
    if args.quick:
        args.voters = 6
    start = time.perf_counter()
    track: RealTextTrack = load()
    if args.quick:  # the SQuAD and Quoref questions over their own passages only
        kept = ("squad", "quoref")
        track = RealTextTrack(
            tuple(r for r in track.records if r.source.startswith(kept)),
            tuple(q for q in track.questions if q.dataset in kept),
        )
    questions = list(track.questions)
    reader = READERS[args.reader]
    token_model, hf_text = load_reader(args.reader, dtype=args.dtype)
    text_model = MemoTextModel(hf_text)
    embedder = MiniLMEmbedder()
    index = CorpusIndex(track.ids(), track.texts(), embedder)
    m, mnt = args.voters, reader.max_new_tokens
    voters = reader.voting_prompts()
    dp = dp_mechanisms(
        token_model, text_model, reader=reader, voters=m, delta=args.delta, max_new_tokens=mnt
    )
    rows: dict[str, Mechanism] = {
        "NonRAG": NonRAG(text_model, max_new_tokens=mnt, template=reader.public_template),
        "RAG (k=3)": RAG(text_model, k=3, max_new_tokens=mnt, template=reader.template),
        f"AnswerVote (m={m})": AnswerVote(text_model, m=m, k=1, max_new_tokens=mnt, **voters),
        **{f"{name} eps={args.epsilon:g}": dp[name](args.epsilon) for name in DP_ROWS},
    }
    if args.only:
        rows = {n: r for n, r in rows.items() if any(o.lower() in n.lower() for o in args.only)}
    results = {
        name: answer_all(mech, index, questions, args.seed)
        for name, mech in tqdm(rows.items(), desc="rows")
    }
    bar = 2 + (2 / args.epsilon) * np.log(2 / args.delta)
    wall = time.perf_counter() - start
    lines = [
        "# The real-text track (allennlp 0.9.0 test fixtures)",
        "",
        f"{len(track.records)} records (chunks of <= 600 characters, one privacy unit each), "
        f"{len(questions)} questions, reader `{args.reader}` ({args.dtype}), m = {m} voters "
        f"(k = 1), epsilon {args.epsilon:g}, delta {args.delta:g}, seed {args.seed}; "
        f"wall {wall:.0f}s.",
        "",
        *table(results, questions),
        "",
        "## What any DP voting mechanism could release here",
        "",
        *support_lines(questions, index, m=m, bar=bar),
        "",
        "## Answers",
        "",
        "| question | " + " | ".join(results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for i, q in enumerate(questions):
        cells = " | ".join(
            f"{'ok' if r[i]['match'] else '--'} {r[i]['text']} ({r[i]['source']})"
            for r in results.values()
        )
        lines.append(f"| {q.question[:50]} | {cells} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
