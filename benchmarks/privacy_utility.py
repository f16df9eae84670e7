"""Privacy-utility benchmark on the synthetic private corpus (offline, 2 CPU cores).

For every mechanism and baseline: match accuracy, token F1, ROUGE-1/L and
normalised Levenshtein similarity vs epsilon; accuracy vs the number of records
supporting each fact (Grislain's Fig. 6); multi-query accuracy over a stream of
questions vs total epsilon for MuRAG, MuRAG-Ada and NaiveMulti. Real parts
throughout: the project's reader LM (or ``--model``), MiniLM embeddings, FAISS.
Results go to ``--out`` (default ``results/privacy_utility``): ``table.md``,
``config.json`` (seeds and settings), ``results.json``, ``accuracy_vs_epsilon.png``,
``accuracy_vs_support.png``, ``multi_query.png``.

    .venv/bin/python benchmarks/privacy_utility.py            # ~5 min on 2 cores
    .venv/bin/python benchmarks/privacy_utility.py --quick    # ~30 s (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from _mechanisms import dp_mechanisms_for, mechanism_arguments, per_answer_budget
from tqdm import tqdm

from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG, VoteRAG
from dprag_core.algorithms.dpvote import DPSparseVote
from dprag_core.algorithms.ksa import KSA
from dprag_core.eval.metrics import METRIC_NAMES, score_answer
from dprag_core.eval.synthetic import QAItem, make_corpus
from dprag_core.eval.workbench import CorpusIndex, load_models, reader_path
from dprag_core.pipeline import PrivateRAG

ROOT = Path(__file__).resolve().parents[1]
SUPPORT_BINS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9))


def bin_label(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else (f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}")


def run_mechanism(
    mech: Mechanism, index: CorpusIndex, items: Sequence[QAItem], seed: int
) -> dict[str, Any]:
    """Answer every item through PrivateRAG; per-item metrics and timing."""
    app = PrivateRAG(mech, index, accountant=per_answer_budget())
    rows = []
    start = time.perf_counter()
    for i, item in enumerate(items):
        ans = app.answer(item.question, rng=seed + i)
        rows.append({**score_answer(ans.text, item.answer), "support": item.support})
    took = (time.perf_counter() - start) / len(items)
    mean = {m: float(np.mean([r[m] for r in rows])) for m in METRIC_NAMES}
    return {"mean": mean, "rows": rows, "seconds_per_query": took}


def support_curve(rows: Sequence[dict[str, float]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for lo, hi in SUPPORT_BINS:
        hits = [r["match"] for r in rows if lo <= r["support"] <= hi]
        out[bin_label(lo, hi)] = float(np.mean(hits)) if hits else None
    return out


def multi_query(
    args: argparse.Namespace, token_model: Any, index: CorpusIndex, items: Sequence[QAItem]
) -> list[dict[str, Any]]:
    """MuRAG / MuRAG-Ada / NaiveMulti over a stream of questions vs total epsilon."""
    from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    from dprag_core.accounting.ledger import InMemoryLedger
    from dprag_core.algorithms import murag
    from dprag_core.budget import Budget, PrivacyBudgetExhausted

    stream = [items[i % len(items)] for i in range(args.multi_queries)]
    eps_q = args.multi_eps_query

    def inner() -> DPSparseVote:
        return DPSparseVote(
            token_model,
            m=args.voters,
            k=1,
            epsilon=eps_q,
            delta=0.0,
            epsilon_token=eps_q * args.token_share,
            selection="exponential",
            max_new_tokens=args.max_new_tokens,
        )

    def builders(total: float) -> dict[str, Callable[[], tuple[Mechanism, Any]]]:
        out: dict[str, Callable[[], tuple[Mechanism, Any]]] = {
            "MuRAG": lambda: (
                murag.MuRAG(
                    inner(),
                    ledger=InMemoryLedger(budget_per_unit=total),
                    tau=args.tau,
                    epsilon_query=eps_q,
                    k=args.voters,
                ),
                None,
            ),
            "NaiveMulti": lambda: (
                murag.NaiveMulti(inner(), accountant=InMemoryCorpusAccountant(Budget(total))),
                None,
            ),
        }
        out["MuRAG-Ada"] = lambda: (
            murag.MuRAGAda(
                inner(),
                ledger=InMemoryLedger(budget_per_unit=total),
                bins=np.linspace(1.0, args.tau, 6).tolist(),
                epsilon_threshold=0.1 * eps_q,
                epsilon_rag=eps_q,
                k=args.voters,
            ),
            None,
        )
        return out

    results = []
    for total in args.multi_totals:
        for name, build in builders(total).items():
            try:
                mech, accountant = build()
            except (TypeError, ValueError) as exc:
                print(f"multi-query {name}: cannot build ({exc}), skipped", file=sys.stderr)
                continue
            app = PrivateRAG(mech, index, accountant=accountant)
            hits, answered = 0, 0
            for i, item in enumerate(tqdm(stream, desc=f"{name} total eps {total}", leave=False)):
                try:
                    ans = app.answer(item.question, rng=args.seed + i)
                except PrivacyBudgetExhausted:
                    continue
                answered += 1
                hits += int(score_answer(ans.text, item.answer)["match"])
            results.append(
                {
                    "mechanism": name,
                    "total_epsilon": total,
                    "accuracy": hits / len(stream),
                    "answered": answered,
                }
            )
    return results


def plot(
    path: Path,
    series: dict[str, tuple[list[float], list[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    xlog: bool = False,
    hlines: dict[str, float] | None = None,
    xticks: list[str] | None = None,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    for name, y in (hlines or {}).items():
        ax.axhline(
            y, linestyle="--", linewidth=1, label=name, color="grey" if "Non" in name else None
        )
    if xlog:
        ax.set_xscale("log")
    if xticks is not None:
        ax.set_xticks(range(len(xticks)), xticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    ap = mechanism_arguments(__doc__ or "", out=ROOT / "results" / "privacy_utility")
    ap.add_argument(
        "--support-epsilons",
        type=float,
        nargs="+",
        default=[10.0, 50.0],
        help="epsilons of the accuracy-vs-support table (those also in --epsilons)",
    )
    ap.add_argument("--diseases", type=int, default=40)
    ap.add_argument("--max-support", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--tau", type=float, default=0.4, help="MuRAG public score threshold")
    ap.add_argument("--multi-queries", type=int, default=100)
    ap.add_argument("--multi-totals", type=float, nargs="+", default=[10.0, 20.0, 40.0, 80.0])
    ap.add_argument("--multi-eps-query", type=float, default=10.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.epsilons, args.diseases, args.max_support, args.voters = [2.0, 10.0], 6, 20, 10
        args.multi_queries, args.multi_totals = 12, [10.0, 20.0]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    corpus = make_corpus(n_diseases=args.diseases, max_support=args.max_support, seed=args.seed)
    items = corpus.questions_of("treatment") + corpus.questions_of("disease")
    index = CorpusIndex.build(corpus)
    token_model, text_model = load_models(args.model)
    m, mnt = args.voters, args.max_new_tokens

    baselines: dict[str, Mechanism] = {
        "NonRAG": NonRAG(token_model, max_new_tokens=mnt),
        "RAG (k=3)": RAG(token_model, k=3, max_new_tokens=mnt),
        f"VoteRAG (m={m})": VoteRAG(token_model, m=m, k=1, max_new_tokens=mnt),
        f"KSA (N={m})": KSA(text_model, n_docs=m, k_max=5, response_tokens=mnt, answer_tokens=mnt),
    }
    dp = dp_mechanisms_for(args, token_model, text_model)
    results: dict[str, dict[str, Any]] = {}
    for name, mech in tqdm(baselines.items(), desc="baselines"):
        results[name] = run_mechanism(mech, index, items, args.seed)
    for name, build in dp.items():
        for eps in tqdm(args.epsilons, desc=name):
            results[f"{name} eps={eps:g}"] = run_mechanism(build(eps), index, items, args.seed)
    multi = multi_query(args, token_model, index, items)
    wall = time.perf_counter() - t0

    lines = [
        "# Privacy-utility on the synthetic private corpus",
        "",
        f"{len(corpus.records)} records, {len(items)} questions (treatment + disease), "
        f"model `{args.model or reader_path().name}`, seed {args.seed}, wall {wall:.0f}s.",
        "",
        "| mechanism | " + " | ".join(METRIC_NAMES) + " | s/query |",
        "|---|" + "---|" * (len(METRIC_NAMES) + 1),
    ]
    for name, r in results.items():
        cells = " | ".join(f"{r['mean'][mt]:.3f}" for mt in METRIC_NAMES)
        lines.append(f"| {name} | {cells} | {r['seconds_per_query']:.2f} |")
    curve_eps = [e for e in args.support_epsilons if e in args.epsilons] or [max(args.epsilons)]
    curve_names = [*baselines, *(f"{n} eps={e:g}" for n in dp for e in curve_eps)]
    labels = [bin_label(lo, hi) for lo, hi in SUPPORT_BINS]
    counts = {lab: 0 for lab in labels}
    for it in items:
        for lo, hi in SUPPORT_BINS:
            if lo <= it.support <= hi:
                counts[bin_label(lo, hi)] += 1
    lines += [
        "",
        "## Match accuracy vs number of supporting records",
        "",
        "| mechanism | " + " | ".join(f"{lab} (n={counts[lab]})" for lab in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    curves = {n: support_curve(results[n]["rows"]) for n in curve_names}
    for name, curve in curves.items():
        cells = " | ".join("-" if curve[lab] is None else f"{curve[lab]:.2f}" for lab in labels)
        lines.append(f"| {name} | {cells} |")
    if multi:
        lines += [
            "",
            f"## Multi-query: {args.multi_queries} questions, epsilon per query "
            f"{args.multi_eps_query:g}",
            "",
            "| mechanism | total epsilon | accuracy | answered |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['mechanism']} | {r['total_epsilon']:g} | {r['accuracy']:.3f} | {r['answered']} |"
            for r in multi
        ]
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    config = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "records": len(corpus.records),
        "questions": len(items),
        "wall_seconds": wall,
    }
    summary = {
        n: {"mean": r["mean"], "seconds_per_query": r["seconds_per_query"]}
        for n, r in results.items()
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (args.out / "results.json").write_text(
        json.dumps({"summary": summary, "support": curves, "multi": multi}, indent=2) + "\n"
    )

    series = {
        name: (
            args.epsilons,
            [results[f"{name} eps={e:g}"]["mean"]["match"] for e in args.epsilons],
        )
        for name in dp
    }
    hlines = {name: results[name]["mean"]["match"] for name in baselines}
    plot(
        args.out / "accuracy_vs_epsilon.png",
        series,
        xlabel="epsilon per query",
        ylabel="match accuracy",
        title="Accuracy vs epsilon",
        xlog=True,
        hlines=hlines,
    )
    support_series = {
        name: (list(range(len(labels))), [np.nan if c[lab] is None else c[lab] for lab in labels])
        for name, c in curves.items()
    }
    plot(
        args.out / "accuracy_vs_support.png",
        support_series,  # type: ignore[arg-type]
        xlabel="records supporting the fact",
        ylabel="match accuracy",
        title="Accuracy vs support",
        xticks=labels,
    )
    if multi:
        mseries: dict[str, tuple[list[float], list[float]]] = {}
        for r in multi:
            xs, ys = mseries.setdefault(r["mechanism"], ([], []))
            xs.append(r["total_epsilon"])
            ys.append(r["accuracy"])
        plot(
            args.out / "multi_query.png",
            mseries,
            xlabel="total epsilon (per unit / corpus)",
            ylabel="accuracy over the stream",
            title="Multi-query",
            xlog=True,
        )
    print("\n".join(lines))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
