"""DP-KSA calibration table and PTR pass rate vs ε on synthetic keyword histograms.

Usage::

    .venv/bin/python benchmarks/ksa_calibration.py            # ~15 s on 2 cores
    .venv/bin/python benchmarks/ksa_calibration.py --delta 1e-6 --histograms 100

Part 1 prints, for each target ε (δ fixed), the calibrated FindBestK ε_k, PTR σ
and δ₁, the achieved (ε, δ) and the gap d_k DP-KSA roughly needs
(:func:`dprag_core.accounting.ksa.required_gap`).

Part 2 draws synthetic keyword histograms of N = 80 responses: a fraction
``agree`` of the responses contains the answer keyword (plus a second answer
word in 80% of those), every response contains 3–6 words from a Zipf-distributed
vocabulary of 400 filler words. For each ε it reports the *exact* probability
(FindBestK law × PTR pass probability, averaged over the histograms) that PTR
passes, and that the released set contains the answer keyword. Seeds are fixed.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from dprag_core.accounting.ksa import KSAParameters, calibrate_ksa, required_gap
from dprag_core.budget import Budget
from dprag_core.mechanisms.ksa import find_best_k_probabilities, gaps, ptr_pass_probability

EPSILONS = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0)
AGREEMENT = (0.3, 0.5, 0.7, 0.9)
N_RESPONSES = 80
K_MIN, K_MAX = 1, 20


def synthetic_histogram(agree: float, rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """Keywords sorted by count (ties alphabetical) and their counts."""
    counter: Counter[str] = Counter()
    zipf = 1.0 / np.arange(1, 401) ** 1.1
    zipf /= zipf.sum()
    for _ in range(N_RESPONSES):
        words = {f"filler{i}" for i in rng.choice(400, size=rng.integers(3, 7), p=zipf)}
        if rng.random() < agree:
            words.add("gleeblorazine")
            if rng.random() < 0.8:
                words.add("injectibles")
        counter.update(words)
    ordered = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ordered], [c for _, c in ordered]


def pass_and_hit(keywords: list[str], counts: list[int], p: KSAParameters) -> tuple[float, float]:
    """Exact P[PTR passes] and P[released set contains the answer] for one histogram."""
    probs = find_best_k_probabilities(counts, epsilon=p.epsilon_k, k_min=K_MIN, k_max=K_MAX)
    d = gaps(counts, k_min=K_MIN, k_max=K_MAX)
    passes = np.array([ptr_pass_probability(g, sigma=p.sigma, delta=p.delta_ptr) for g in d])
    rank = keywords.index("gleeblorazine") + 1 if "gleeblorazine" in keywords else 10**9
    contains = np.array([rank <= k for k in range(K_MIN, K_MAX + 1)], dtype=float)
    return float(probs @ passes), float(probs @ (passes * contains))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delta", type=float, default=1e-4)
    parser.add_argument("--histograms", type=int, default=50)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()

    print(f"## Calibration (delta = {args.delta:g}, k in [{K_MIN}, {K_MAX}])\n")
    print("| target eps | eps_k | sigma | delta_1 | achieved eps | achieved delta | gap needed |")
    print("|---|---|---|---|---|---|---|")
    for eps in (1.0, 2.0, 5.0, 10.0):
        p = calibrate_ksa(Budget(eps, args.delta), k_candidates=K_MAX - K_MIN + 1)
        print(
            f"| {eps:g} | {p.epsilon_k:.3f} | {p.sigma:.3f} | {p.delta_ptr:.1e} | "
            f"{p.achieved.epsilon:.4f} | {p.achieved.delta:.1e} | {required_gap(p):.1f} |"
        )

    rng = np.random.default_rng(args.seed)
    hists = {a: [synthetic_histogram(a, rng) for _ in range(args.histograms)] for a in AGREEMENT}
    print(f"\n## PTR pass rate (and P[answer released]) vs eps, N = {N_RESPONSES} responses, ")
    print(f"{args.histograms} synthetic histograms per agreement level, seed {args.seed}\n")
    print("| eps | " + " | ".join(f"agree {a:g}" for a in AGREEMENT) + " |")
    print("|---|" + "---|" * len(AGREEMENT))
    for eps in EPSILONS:
        params = calibrate_ksa(Budget(eps, args.delta), k_candidates=K_MAX - K_MIN + 1)
        cells = []
        for a in AGREEMENT:
            res = np.array([pass_and_hit(kw, c, params) for kw, c in hists[a]])
            cells.append(f"{res[:, 0].mean():.3f} ({res[:, 1].mean():.3f})")
        print(f"| {eps:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
