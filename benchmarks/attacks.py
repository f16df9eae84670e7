"""Attack benchmark: canary extraction and S2MIA-style membership inference (offline).

Half of the synthetic patients are indexed (members), the other half held out
(non-members). For non-private RAG and each DP mechanism at several epsilons:

- canary extraction rate: "What is <name>'s phone number?" for members, the
  fraction of answers containing the phone number verbatim;
- S2MIA-style MIA AUC: the same query for members and non-members, scored by
  the similarity of the answer to the true phone (normalised Levenshtein); the
  ROC AUC separating members from non-members (0.5 = chance), with a 95%
  percentile-bootstrap interval (a few dozen targets leave an AUC uncertain by
  about +-0.1).

Results go to ``--out`` (default ``results/attacks``): ``table.md``,
``config.json``, ``attacks.png``.

    .venv/bin/python benchmarks/attacks.py            # ~5 min on 2 cores
    .venv/bin/python benchmarks/attacks.py --quick    # a smoke run: ~70 s of CPU
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from _mechanisms import dp_mechanisms_for, load_for, mechanism_arguments, per_answer_budget
from tqdm import tqdm

from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG
from dprag_core.eval.attacks import (
    extraction_rate,
    membership_auc,
    membership_auc_interval,
    s2mia_query,
    s2mia_score,
    split_members,
)
from dprag_core.eval.embeddings import MiniLMEmbedder
from dprag_core.eval.synthetic import PatientRecord, make_corpus
from dprag_core.eval.workbench import CorpusIndex
from dprag_core.pipeline import PrivateRAG

ROOT = Path(__file__).resolve().parents[1]


def attack(
    mech: Mechanism,
    index: CorpusIndex,
    members: Sequence[PatientRecord],
    nonmembers: Sequence[PatientRecord],
    seed: int,
) -> dict[str, float]:
    app = PrivateRAG(mech, index, accountant=per_answer_budget())
    scores: dict[str, list[float]] = {"member": [], "nonmember": []}
    answers, secrets = [], []
    for group, records in (("member", members), ("nonmember", nonmembers)):
        for i, record in enumerate(records):
            query, secret = s2mia_query(record)
            text = app.answer(query, rng=seed + i).text
            scores[group].append(s2mia_score(text, secret))
            if group == "member":
                answers.append(text)
                secrets.append(secret)
    low, high = membership_auc_interval(scores["member"], scores["nonmember"], rng=seed)
    return {
        "extraction": extraction_rate(answers, secrets),
        "mia_auc": membership_auc(scores["member"], scores["nonmember"]),
        "mia_auc_low": low,
        "mia_auc_high": high,
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = mechanism_arguments(__doc__ or "", out=ROOT / "results" / "attacks")
    ap.add_argument("--diseases", type=int, default=60, help="synthetic corpus size (Zipf, max 20)")
    ap.add_argument("--targets", type=int, default=60, help="members and non-members attacked")
    ap.add_argument(
        "--max-new-tokens", type=int, default=16, help="a phone number is 13 tokens + EOS"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.epsilons, args.targets, args.voters, args.diseases = [10.0], 8, 10, 20
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    corpus = make_corpus(n_diseases=args.diseases, max_support=20, seed=args.seed)
    members, nonmembers = split_members(corpus, rng=args.seed)
    index = CorpusIndex([r.id for r in members], [r.text for r in members], MiniLMEmbedder())
    rng = np.random.default_rng(args.seed)
    n = min(args.targets, len(members), len(nonmembers))
    tm = [members[int(i)] for i in rng.choice(len(members), n, replace=False)]
    tn = [nonmembers[int(i)] for i in rng.choice(len(nonmembers), n, replace=False)]
    token_model, text_model = load_for(args)
    mnt = args.max_new_tokens

    mechanisms = dp_mechanisms_for(args, token_model, text_model)
    rows: list[dict[str, Any]] = []
    baselines = (
        ("NonRAG", NonRAG(token_model, max_new_tokens=mnt)),
        ("RAG (k=1)", RAG(token_model, k=1, max_new_tokens=mnt)),
        ("RAG (k=3)", RAG(token_model, k=3, max_new_tokens=mnt)),
    )
    for name, mech in baselines:
        rows.append({"mechanism": name, "epsilon": None, **attack(mech, index, tm, tn, args.seed)})
    for name, build in mechanisms.items():
        for eps in tqdm(args.epsilons, desc=name):
            rows.append(
                {"mechanism": name, "epsilon": eps, **attack(build(eps), index, tm, tn, args.seed)}
            )
    wall = time.perf_counter() - t0

    lines = [
        "# Attacks: canary extraction and S2MIA-style membership inference",
        "",
        f"{len(members)} member / {len(nonmembers)} held-out records; {n} targets each; "
        f"model `{args.model or args.reader}`; seed {args.seed}; wall {wall:.0f}s.",
        "",
        "| mechanism | epsilon | canary extraction rate | MIA AUC [95% bootstrap CI] |",
        "|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
        if r["mechanism"] == "NonRAG":
            eps = "0"
        elif r["epsilon"] is None:
            eps = "inf"
        auc = f"{r['mia_auc']:.3f} [{r['mia_auc_low']:.2f}, {r['mia_auc_high']:.2f}]"
        lines.append(f"| {r['mechanism']} | {eps} | {r['extraction']:.3f} | {auc} |")
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    config = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "members": len(members),
        "targets": n,
        "wall_seconds": wall,
        "rows": rows,
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], "extraction", "Canary extraction rate"),
        (axes[1], "mia_auc", "S2MIA-style MIA AUC"),
    ):
        for name in mechanisms:
            pts = [(r["epsilon"], r[key]) for r in rows if r["mechanism"] == name]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        for r in rows[: len(baselines)]:
            ax.axhline(
                r[key],
                linestyle="--",
                linewidth=1,
                label=r["mechanism"],
                color={"NonRAG": "grey", "RAG (k=1)": "black"}.get(r["mechanism"], "brown"),
            )
        ax.set_xscale("log")
        ax.set_xlabel("epsilon per query")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "attacks.png", dpi=120)
    plt.close(fig)
    print("\n".join(lines))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
