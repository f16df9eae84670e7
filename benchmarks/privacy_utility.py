"""Privacy-utility benchmark on the synthetic private corpus (offline, 2 CPU cores).

For every mechanism and baseline: match accuracy, token F1, ROUGE-1/L and
normalised Levenshtein similarity vs epsilon; per epsilon, accuracy vs the number
of records supporting each fact (Grislain's Fig. 6); per epsilon, the private
tokens per answer and the free-token share (released tokens, the end of the answer
included, that cost no budget: DPSparseVote's public prediction agreed with the
voters) of the mechanisms that report ``private_tokens``; 95% percentile-bootstrap
intervals over the questions throughout those tables; multi-query accuracy over a
stream of questions vs total epsilon for MuRAG, MuRAG-Ada and NaiveMulti. Real
parts throughout: the project's reader LM (or ``--model``), MiniLM embeddings,
FAISS. Results go to ``--out`` (default ``results/privacy_utility``): ``table.md``,
``config.json`` (seeds and settings), ``results.json``, ``accuracy_vs_epsilon.png``,
``accuracy_vs_support_eps<e>.png`` (one per epsilon), ``tokens.png``,
``multi_query.png``.

    .venv/bin/python benchmarks/privacy_utility.py            # ~8 min on 2 cores
    .venv/bin/python benchmarks/privacy_utility.py --quick    # ~30 s (a smoke run)

``--reader smollm2`` runs SmolLM2-135M-Instruct (``dprag_core/eval/smollm2.py``)
with its prompts and defaults (``dprag_core/eval/readers.py``): every prompt goes
through its chat template. ``--real-treatments`` gives the treatments real drug
names (the world variant for readers that cannot copy invented words);
``--min-support`` and ``--kinds`` keep fewer questions (e.g. the 16+ treatment
facts); ``--diagnose`` adds what limits a row: how many of the m voters hold a
record of the fact, and how many of those records make the reader, alone, answer
right.

    .venv/bin/python benchmarks/privacy_utility.py --reader smollm2 --real-treatments \
        --kinds treatment --min-support 16 --epsilons 5 --multi-queries 0 --diagnose
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from _mechanisms import (
    TEXT_ONLY,
    MemoTextModel,
    answer_key_of,
    dp_mechanisms_for,
    load_for,
    mechanism_arguments,
    per_answer_budget,
    reader_settings,
    record_filter_of,
)
from tqdm import tqdm

from dprag_core.algorithms.answer_keys import render_key
from dprag_core.algorithms.answer_vote import AnswerVote
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG, VoteRAG
from dprag_core.algorithms.dpvote import DPSparseVote
from dprag_core.algorithms.ksa import KSA
from dprag_core.eval.metrics import METRIC_NAMES, match, ratio_interval, score_answer
from dprag_core.eval.readers import Reader
from dprag_core.eval.synthetic import QAItem, make_corpus
from dprag_core.eval.workbench import CorpusIndex
from dprag_core.pipeline import PrivateRAG

ROOT = Path(__file__).resolve().parents[1]
SUPPORT_BINS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9))


def bin_label(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else (f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}")


#: How an answer ended when its last decision was the end token (or LimitedDomain's ⊥).
ENDED_BY_A_DECISION = ("eos", "null_token")


def selected(name: str, only: Sequence[str]) -> bool:
    """Whether ``--only`` keeps a mechanism: its name contains one of ``only``.

    >>> selected("DPVote (LD)", ["dpvote"]), selected("DPSparseVote (LD)", ["DPVote"])
    (True, False)
    """
    return any(part.lower() in name.lower() for part in only)


def token_counts(details: Mapping[str, Any]) -> dict[str, float]:
    """Released tokens and private ones of a voting answer (empty for other mechanisms).

    Every released token (each text token, and the end token when it ended the
    answer) came from a private or a free decision; ``private_tokens`` counts those of
    private decisions (every token of a private word, for ``unit="word"``), so free =
    tokens - private_tokens exactly.
    """
    if "tokens_generated" not in details:  # DP-ICL reports private_tokens too
        return {}
    ended = details.get("stop_reason") in ENDED_BY_A_DECISION
    decisions = int(details["tokens_generated"]) + int(ended)
    private = int(details["private_tokens"])
    words = {"private_words": int(details["private_words"])} if "private_words" in details else {}
    return {"decisions": decisions, "private": private, "free": decisions - private, **words}


def run_mechanism(
    mech: Mechanism, index: CorpusIndex, items: Sequence[QAItem], seed: int
) -> dict[str, Any]:
    """Answer every item through PrivateRAG; per-item metrics, token counts and timing."""
    app = PrivateRAG(mech, index, accountant=per_answer_budget())
    rows = []
    start = time.perf_counter()
    for i, item in enumerate(items):
        ans = app.answer(item.question, rng=seed + i)
        rows.append(
            {
                **score_answer(ans.text, item.answer),
                **token_counts(ans.details),
                "support": item.support,
                "stop": str(ans.details.get("stop_reason", "-")),
            }
        )
    took = (time.perf_counter() - start) / len(items)
    mean = {m: float(np.mean([r[m] for r in rows])) for m in METRIC_NAMES}
    return {"mean": mean, "rows": rows, "seconds_per_query": took}


Interval = tuple[float, float, float]


def interval(num: Sequence[float], den: Sequence[float], seed: int) -> Interval | None:
    """Σ num / Σ den with its 95% bootstrap interval (None without questions)."""
    return ratio_interval(num, den, rng=seed) if len(num) else None


def support_curve(rows: Sequence[dict[str, float]], seed: int) -> dict[str, Interval | None]:
    """Match accuracy [95% CI] per support bin."""
    out: dict[str, Interval | None] = {}
    for lo, hi in SUPPORT_BINS:
        hits = [r["match"] for r in rows if lo <= r["support"] <= hi]
        out[bin_label(lo, hi)] = interval(hits, [1.0] * len(hits), seed)
    return out


def token_summary(rows: Sequence[dict[str, float]], seed: int) -> dict[str, Interval] | None:
    """Private tokens per answer and the free-token share, each [95% CI]; None if not voting."""
    if not rows or "decisions" not in rows[0]:
        return None
    private = [r["private"] for r in rows]
    share = interval([r["free"] for r in rows], [r["decisions"] for r in rows], seed)
    assert share is not None
    per_answer = interval(private, [1.0] * len(rows), seed)
    assert per_answer is not None
    return {"private_per_answer": per_answer, "free_share": share}


def cell(value: Interval | None) -> str:
    """``0.67 [0.42, 0.92]``, or ``-``."""
    if value is None or np.isnan(value[0]):
        return "-"
    v, lo, hi = value
    digits = 1 if max(abs(v), abs(hi)) >= 10 else 2
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def stop_table(results: Mapping[str, dict[str, Any]]) -> list[str]:
    """Per row: how its answers ended (stop reasons) and private words per answer."""
    lines = [
        "",
        "## How the answers ended",
        "",
        "Stop reasons (answers), and private words (word-level rows) per answer.",
        "",
        "| row | stop reasons | private words per answer |",
        "|---|---|---|",
    ]
    for name, r in results.items():
        stops: dict[str, int] = {}
        for row in r["rows"]:
            stops[row["stop"]] = stops.get(row["stop"], 0) + 1
        words = [row["private_words"] for row in r["rows"] if "private_words" in row]
        per = f"{np.mean(words):.2f}" if words else "-"
        lines.append(
            f"| {name} | {', '.join(f'{k} {v}' for k, v in sorted(stops.items()))} | {per} |"
        )
    return lines


def diagnose(
    reader: Reader,
    text_model: Any,
    index: CorpusIndex,
    items: Sequence[QAItem],
    corpus: Any,
    *,
    m: int,
    max_new_tokens: int,
    per_fact: int = 5,
) -> list[str]:
    """Reader-bound or retrieval-bound: per fact, how many of the m voters' records
    support it, and how many of ``per_fact`` supporting records make the reader alone
    (greedy, the voters' prompt) answer right."""
    texts = {r.id: r.text for r in corpus.records}
    lines = [
        "",
        "## What limits the answers",
        "",
        f"Per kind of question: of the m = {m} voters, those holding a record of the fact "
        "(mean, min-max), and how often the reader alone, given one record of the fact "
        f"(the voters' prompt, greedy; up to {per_fact} records per fact), answers right.",
        "",
        "| questions | voters holding a record | reader alone right |",
        "|---|---|---|",
    ]
    for kind in sorted({item.kind for item in items}):
        relevant, copied, tried = [], 0, 0
        for item in (it for it in items if it.kind == kind):
            ids = {d.id for d in index(item.question, m)}
            relevant.append(len(ids & set(item.record_ids)))
            records = [texts[i] for i in item.record_ids[:per_fact]]
            prompts = [reader.template.format(context=t, question=item.question) for t in records]
            outs = text_model.generate(prompts, max_new_tokens=max_new_tokens)
            copied += sum(score_answer(o, item.answer)["match"] == 1.0 for o in outs)
            tried += len(outs)
        lines.append(
            f"| {kind} ({len(relevant)}) | {np.mean(relevant):.1f} ({min(relevant)}-"
            f"{max(relevant)}) | {copied} of {tried} ({copied / max(tried, 1):.2f}) |"
        )
    return lines


WELL_SUPPORTED = 16
"""The headline facts: those with this many supporting records or more (the 16+ bin)."""


def best_lines(
    results: Mapping[str, dict[str, Any]], dp: Sequence[str], epsilons: Sequence[float]
) -> list[str]:
    """Per epsilon: the best text-only DP row and the best DP row on the 16+ facts.

    ``best text-only DP: <row> <match> on <n> facts (eps=<e>)`` and ``best DP: ...``
    (ties to the first row in the table's order), for scripts to read.
    """
    lines = []
    for eps in epsilons:
        scores = {}
        for name in dp:
            rows = results[f"{name} eps={eps:g}"]["rows"]
            rows = [r for r in rows if r["support"] >= WELL_SUPPORTED]
            if rows:
                scores[name] = (float(np.mean([r["match"] for r in rows])), len(rows))
        for label, names in (
            ("best text-only DP", [n for n in scores if n in TEXT_ONLY]),
            ("best DP", list(scores)),
        ):
            if names:
                best = max(names, key=lambda n: scores[n][0])
                value, n = scores[best]
                lines.append(f"{label}: {best} {value:.2f} on {n} facts (eps={eps:g})")
    return lines


def answer_votes(
    voting: AnswerVote,
    index: CorpusIndex,
    items: Sequence[QAItem],
    seed: int,
    *,
    epsilons: Sequence[float],
    delta: float,
) -> list[str]:
    """Where the answer-level votes went, on the 16+ facts (benchmark instrumentation:
    the votes are private, never released by the mechanism).

    Per question: the voters that answered (did not abstain), the distinct keys, the
    top key's votes and the votes for keys that match the gold answer; then
    LimitedDomain's bar at each epsilon, h⊥ = 2 + (2/ε)·ln(2/δ) votes (before
    logistic noise of scale 2/ε).
    """
    lines = [
        "",
        "## Where the answer-level votes went (16+ facts)",
        "",
        f"The m = {voting.m} voters' answer keys (AnswerVote's = DPAnswerVote's: the same "
        "voters, the same answers); the gold key is any key whose rendering matches the "
        "gold answer.",
        "",
        "| question | support | answered | distinct keys | top key (votes) | gold votes |",
        "|---|---|---|---|---|---|",
    ]
    summary: list[tuple[int, int, int, int]] = []
    for i, item in enumerate(items):
        if item.support < WELL_SUPPORTED:
            continue
        keys = voting.keys(
            item.question, index(item.question, voting.candidates_needed()), rng=seed + i
        )
        counts = Counter(keys)
        top, top_votes = counts.most_common(1)[0] if counts else ("-", 0)
        gold = sum(c for k, c in counts.items() if match(render_key(k), item.answer))
        summary.append((len(keys), len(counts), top_votes, gold))
        lines.append(
            f"| {item.kind}: {item.answer} | {item.support} | {len(keys)} | {len(counts)} | "
            f"{top} ({top_votes}) | {gold} |"
        )
    if summary:
        means = np.mean(np.array(summary, dtype=float), axis=0)
        top_is_gold = sum(g == t and t > 0 for _, _, t, g in summary)
        lines.append(
            f"| mean ({len(summary)} questions; top key = gold in {top_is_gold}) | | "
            f"{means[0]:.1f} | {means[1]:.1f} | {means[2]:.1f} | {means[3]:.1f} |"
        )
    bars = ", ".join(f"{2 + (2 / e) * np.log(2 / delta):.1f} at eps={e:g}" for e in epsilons)
    lines += ["", f"LimitedDomain's bar h⊥ (votes the top key must beat, before noise): {bars}."]
    return lines


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
            epsilon_token=eps_q * reader_settings(args).token_share,
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
    ylim: tuple[float, float] | None = (-0.02, 1.02),
    bands: dict[str, tuple[list[float], list[float]]] | None = None,
) -> None:
    """One line per series (with a shaded interval where ``bands`` has one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        (line,) = ax.plot(xs, ys, marker="o", label=name)
        if bands and name in bands:
            ax.fill_between(xs, *bands[name], color=line.get_color(), alpha=0.15)
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
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def support_tables(
    results: Mapping[str, dict[str, Any]],
    baselines: Sequence[str],
    dp: Sequence[str],
    epsilons: Sequence[float],
    items: Sequence[QAItem],
    out: Path,
    seed: int,
) -> tuple[list[str], dict[str, dict[str, dict[str, Interval | None]]]]:
    """Per epsilon: match accuracy [95% CI] by support bin (table lines, PNG), and the data."""
    labels = [bin_label(lo, hi) for lo, hi in SUPPORT_BINS]
    counts = {
        bin_label(lo, hi): sum(lo <= it.support <= hi for it in items) for lo, hi in SUPPORT_BINS
    }
    head = "| mechanism | " + " | ".join(f"{lab} (n={counts[lab]})" for lab in labels) + " |"
    lines: list[str] = []
    data: dict[str, dict[str, dict[str, Interval | None]]] = {}
    for eps in epsilons:
        names = {**{b: b for b in baselines}, **{n: f"{n} eps={eps:g}" for n in dp}}
        curves = {n: support_curve(results[key]["rows"], seed) for n, key in names.items()}
        data[f"{eps:g}"] = curves
        lines += [
            "",
            f"## Match accuracy [95% CI] vs supporting records, epsilon = {eps:g}",
            "",
            head,
            "|---|" + "---|" * len(labels),
        ]
        lines += [
            f"| {n} | " + " | ".join(cell(c[lab]) for lab in labels) + " |"
            for n, c in curves.items()
        ]
        xs = list(range(len(labels)))
        mid = {
            n: [np.nan if c[lab] is None else c[lab][0] for lab in labels]
            for n, c in curves.items()
        }
        band = {
            n: (
                [np.nan if c[lab] is None else c[lab][1] for lab in labels],
                [np.nan if c[lab] is None else c[lab][2] for lab in labels],
            )
            for n, c in curves.items()
            if n in dp
        }
        plot(
            out / f"accuracy_vs_support_eps{eps:g}.png",
            {n: (xs, ys) for n, ys in mid.items()},
            xlabel="records supporting the fact",
            ylabel="match accuracy",
            title=f"Accuracy vs support, epsilon = {eps:g} per query",
            xticks=labels,
            bands=band,
        )
    return lines, data


def token_table(
    results: Mapping[str, dict[str, Any]],
    dp: Sequence[str],
    epsilons: Sequence[float],
    out: Path,
    seed: int,
) -> tuple[list[str], dict[str, dict[str, dict[str, Interval]]]]:
    """Private tokens per answer and free-token share [95% CI] per epsilon (lines, PNG, data)."""
    data: dict[str, dict[str, dict[str, Interval]]] = {}
    for name in dp:
        per_eps = {
            f"{e:g}": token_summary(results[f"{name} eps={e:g}"]["rows"], seed) for e in epsilons
        }
        if all(v is not None for v in per_eps.values()):
            data[name] = {e: v for e, v in per_eps.items() if v is not None}
    if not data:
        return [], data
    head = " | ".join(f"eps={e:g} private / free share" for e in epsilons)
    lines = [
        "",
        "## Private tokens per answer / free-token share [95% CI]",
        "",
        "Released tokens (the end of the answer included) that cost no budget.",
        "",
        f"| mechanism | {head} |",
        "|---|" + "---|" * len(epsilons),
    ]
    for name, per_eps in data.items():
        cells = " | ".join(
            f"{cell(per_eps[f'{e:g}']['private_per_answer'])} / "
            f"{cell(per_eps[f'{e:g}']['free_share'])}"
            for e in epsilons
        )
        lines.append(f"| {name} | {cells} |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in (
        (axes[0], "private_per_answer", "private tokens per answer"),
        (axes[1], "free_share", "free-token share"),
    ):
        for name, per_eps in data.items():
            v = [per_eps[f"{e:g}"][key] for e in epsilons]
            (line,) = ax.plot(epsilons, [x[0] for x in v], marker="o", label=name)
            ax.fill_between(
                epsilons, [x[1] for x in v], [x[2] for x in v], color=line.get_color(), alpha=0.15
            )
        ax.set_xscale("log")
        ax.set_xlabel("epsilon per query")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    axes[1].set_ylim(-0.02, 1.02)
    fig.tight_layout()
    fig.savefig(out / "tokens.png", dpi=120)
    plt.close(fig)
    return lines, data


def main(argv: Sequence[str] | None = None) -> None:
    ap = mechanism_arguments(__doc__ or "", out=ROOT / "results" / "privacy_utility")
    ap.set_defaults(epsilons=[1.0, 2.0, 5.0, 10.0, 20.0])
    ap.add_argument("--diseases", type=int, default=40)
    ap.add_argument("--max-support", type=int, default=100)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the reader's")
    ap.add_argument("--real-treatments", action="store_true", help="real drug names")
    ap.add_argument("--min-support", type=int, default=1, help="only facts with this support")
    ap.add_argument(
        "--kinds", nargs="+", choices=["treatment", "disease"], default=["treatment", "disease"]
    )
    ap.add_argument("--diagnose", action="store_true", help="what limits the answers")
    ap.add_argument(
        "--text-cache",
        type=Path,
        default=None,
        help="a JSON file of the text-only rows' answers (greedy: read when it exists,\n"
        "written after the run), so a rerun of the same prompts costs no model calls",
    )
    ap.add_argument("--tau", type=float, default=0.4, help="MuRAG public score threshold")
    ap.add_argument("--multi-queries", type=int, default=100, help="0: no multi-query run")
    ap.add_argument("--multi-totals", type=float, nargs="+", default=[10.0, 20.0, 40.0, 80.0])
    ap.add_argument("--multi-eps-query", type=float, default=10.0)
    ap.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only the mechanisms and baselines whose name contains one of these\n"
        "(case-insensitive), e.g. --only DPVote DPSparseVote VoteRAG; default: all",
    )
    args = ap.parse_args(argv)
    filtering = record_filter_of(args)  # refuses --filter-depth without a filter, first
    if args.quick:
        args.epsilons, args.diseases, args.max_support, args.voters = [2.0, 10.0], 6, 20, 10
        args.multi_queries, args.multi_totals = 12, [10.0, 20.0]
    reader = reader_settings(args)
    if args.max_new_tokens is None:
        args.max_new_tokens = reader.max_new_tokens
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    corpus = make_corpus(
        n_diseases=args.diseases,
        max_support=args.max_support,
        seed=args.seed,
        real_treatments=args.real_treatments,
    )
    items = [
        q for kind in args.kinds for q in corpus.questions_of(kind) if q.support >= args.min_support
    ]
    index = CorpusIndex.build(corpus)
    token_model, hf_text = load_for(args)
    # the text-only rows' answers, computed once (and kept in --text-cache when given)
    text_model = MemoTextModel(hf_text, cache=args.text_cache)
    m, mnt = args.voters, args.max_new_tokens
    voters = reader.voting_prompts()
    answer_voting = AnswerVote(
        text_model,
        m=m,
        k=1,
        max_new_tokens=mnt,
        key=answer_key_of(reader),
        **filtering,
        **voters,
    )

    baselines: dict[str, Mechanism] = {
        "NonRAG": NonRAG(token_model, max_new_tokens=mnt, template=reader.public_template),
        "RAG (k=3)": RAG(token_model, k=3, max_new_tokens=mnt, template=reader.template),
        f"VoteRAG (m={m})": VoteRAG(token_model, m=m, k=1, max_new_tokens=mnt, **voters),
        f"VoteRAG (m={m}, words)": VoteRAG(
            token_model, m=m, k=1, max_new_tokens=mnt, unit="word", **voters
        ),
        f"AnswerVote (m={m})": answer_voting,
        f"KSA (N={m})": KSA(
            text_model,
            n_docs=m,
            k_max=5,
            response_tokens=mnt,
            answer_tokens=mnt,
            **reader.ksa_prompts(),
        ),
    }
    dp = dp_mechanisms_for(args, token_model, text_model)
    if args.only:
        baselines = {n: b for n, b in baselines.items() if selected(n, args.only)}
        dp = {n: d for n, d in dp.items() if selected(n, args.only)}
    results: dict[str, dict[str, Any]] = {}
    for name, mech in tqdm(baselines.items(), desc="baselines"):
        results[name] = run_mechanism(mech, index, items, args.seed)
    for name, build in dp.items():
        for eps in tqdm(args.epsilons, desc=name):
            results[f"{name} eps={eps:g}"] = run_mechanism(build(eps), index, items, args.seed)
    multi = multi_query(args, token_model, index, items) if args.multi_queries else []
    limits = (
        diagnose(reader, text_model, index, items, corpus, m=m, max_new_tokens=mnt)
        if args.diagnose
        else []
    )
    if any("AnswerVote" in name for name in [*baselines, *dp]):
        limits += answer_votes(
            answer_voting, index, items, args.seed, epsilons=args.epsilons, delta=args.delta
        )
    text_model.save()
    wall = time.perf_counter() - t0
    depth = (
        f" (depth {answer_voting.filter_depth}: the top {answer_voting.candidates_needed()} "
        "candidates)"
        if answer_voting.record_filter is not None
        else ""
    )

    lines = [
        "# Privacy-utility on the synthetic private corpus",
        "",
        f"{len(corpus.records)} records, {len(items)} questions ({' + '.join(args.kinds)}"
        f"{f', support >= {args.min_support}' if args.min_support > 1 else ''}), "
        f"model `{args.model or args.reader}` ({args.dtype}), seed {args.seed}"
        f"{', real drug names' if args.real_treatments else ''}; word share "
        f"{reader.word_share:g}, token share {reader.token_share:g}, threshold "
        f"{reader.threshold(m):g}, answer key words {reader.answer_words}, record filter "
        f"{args.record_filter}{depth}; wall {wall:.0f}s.",
        "",
        "| mechanism | " + " | ".join(METRIC_NAMES) + " | s/query |",
        "|---|" + "---|" * (len(METRIC_NAMES) + 1),
    ]
    for name, r in results.items():
        cells = " | ".join(f"{r['mean'][mt]:.3f}" for mt in METRIC_NAMES)
        lines.append(f"| {name} | {cells} | {r['seconds_per_query']:.2f} |")
    support_lines, curves = support_tables(
        results, list(baselines), list(dp), args.epsilons, items, args.out, args.seed
    )
    token_lines, tokens = token_table(results, list(dp), args.epsilons, args.out, args.seed)
    best = best_lines(results, list(dp), args.epsilons)
    lines += ["", f"## Best rows on the {WELL_SUPPORTED}+ facts (reader {args.reader})", ""]
    lines += [f"    {line}" for line in best]
    lines += support_lines + token_lines + stop_table(results) + limits
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
        json.dumps(
            {"summary": summary, "support": curves, "tokens": tokens, "multi": multi}, indent=2
        )
        + "\n"
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
    print("\n".join(["", *best]))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
