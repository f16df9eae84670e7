"""DP SimHash datastore benchmark: build time, query latency, accuracy vs epsilon and vs b, MIA.

Usage::

    .venv/bin/python benchmarks/datastore.py            # MiniLM embeddings, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/datastore.py --quick    # smaller sets, a hashing embedder

Writes ``results/datastore.md`` and prints the same tables. The labelled text
dataset is synthetic (topic sentences from per-class vocabularies with
cross-topic noise words), so it needs no download; seeds are fixed and printed.
"""

from __future__ import annotations

import argparse
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dprag_core.datastore import DPSimHashDatastore, embedding_keys
from dprag_core.eval.mia import membership_inference

TOPICS = {
    "cardiology": "heart artery valve rhythm pressure cholesterol stent pulse aorta beat",
    "dermatology": "skin rash itch lesion mole eczema acne sunburn scar blister",
    "neurology": "brain nerve seizure migraine memory tremor spine numbness stroke reflex",
    "gastro": "stomach bowel liver ulcer nausea digestion colon reflux bloating appetite",
}
FILLER = ["the", "patient", "reported", "a", "mild", "severe", "recent", "chronic", "episode"]


def make_dataset(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``n`` topic sentences: 6 words from the class vocabulary (30% from another), 4 fillers."""
    rng = np.random.default_rng(seed)
    vocab = [words.split() for words in TOPICS.values()]
    labels = rng.integers(0, len(vocab), n)
    texts = []
    for y in labels:
        words = []
        for _ in range(6):
            source = vocab[y] if rng.random() > 0.3 else vocab[rng.integers(len(vocab))]
            words.append(source[rng.integers(len(source))])
        words += list(rng.choice(FILLER, 4))
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts, labels


def hashing_embedder(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    """A deterministic bag-of-words embedder (for --quick runs without MiniLM)."""
    out = np.zeros((len(texts), dim))
    for i, text in enumerate(texts):
        for word in text.split():
            out[i, zlib.crc32(word.encode()) % dim] += 1.0
    return out


def minilm_embedder() -> Callable[[Sequence[str]], np.ndarray]:
    """The shipped all-MiniLM-L6-v2 (sha256-checked) from dprag_core.eval.embeddings."""
    from dprag_core.eval.embeddings import MiniLMEmbedder

    model = MiniLMEmbedder()
    return lambda texts: np.asarray(model.encode(list(texts)))


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    n_train, n_test, n_build = (2000, 500, 20_000) if args.quick else (8000, 1000, 100_000)
    embed = hashing_embedder if args.quick else minilm_embedder()
    report = [f"# DP SimHash datastore (seed {args.seed}, quick={args.quick})\n"]

    rng = np.random.default_rng(args.seed)
    keys = rng.standard_normal((n_build, 384)).astype(np.float32)
    labels = rng.integers(0, 4, n_build)
    start = time.perf_counter()
    store = DPSimHashDatastore.release(keys, labels, num_classes=4, epsilon=5.0, tables=16, bits=8)
    build = time.perf_counter() - start
    start = time.perf_counter()
    store.predict(keys[:1000])
    batch = (time.perf_counter() - start) / 1000
    start = time.perf_counter()
    for k in keys[:200]:
        store.predict(k[None])
    single = (time.perf_counter() - start) / 200
    report.append(
        table(
            "Build and query",
            ["records", "L", "b", "build s", "batched query ms", "single query ms"],
            [[n_build, 16, 8, f"{build:.2f}", f"{batch * 1e3:.4f}", f"{single * 1e3:.3f}"]],
        )
    )

    texts, y = make_dataset(n_train + n_test, args.seed)
    x = embedding_keys(embed, texts)
    x_train, y_train, x_test, y_test = x[:n_train], y[:n_train], x[n_train:], y[n_train:]

    def accuracy(epsilon: float | None, bits: int, seed: int) -> float:
        if epsilon is None:
            s = DPSimHashDatastore.non_private(
                x_train, y_train, num_classes=4, tables=16, bits=bits
            )
        else:
            s = DPSimHashDatastore.release(
                x_train, y_train, num_classes=4, epsilon=epsilon, tables=16, bits=bits, rng=seed
            )
        return float((s.predict(x_test) == y_test).mean())

    epsilons: list[float | None] = [None, 8.0, 5.0, 3.0, 1.0, 0.1]
    rows = [
        ["non-private" if e is None else e, f"{np.mean([accuracy(e, 8, s) for s in range(3)]):.3f}"]
        for e in epsilons
    ]
    report.append(
        table("Accuracy vs epsilon (L=16, b=8, mean of 3 releases)", ["epsilon", "acc"], rows)
    )

    bits_grid = [4, 8, 12, 16]
    rows = [
        [e, *(f"{np.mean([accuracy(e, b, s) for s in range(3)]):.3f}" for b in bits_grid)]
        for e in (1.0, 5.0)
    ]
    report.append(table("Accuracy vs b (L=16)", ["epsilon", *map(str, bits_grid)], rows))

    half = n_train // 2
    members, m_labels = x_train[:half], y_train[:half]
    rows = []
    for e in [None, 8.0, 5.0, 3.0, 1.0]:
        if e is None:
            s = DPSimHashDatastore.non_private(members, m_labels, num_classes=4, tables=16, bits=12)
        else:
            s = DPSimHashDatastore.release(
                members, m_labels, num_classes=4, epsilon=e, tables=16, bits=12, rng=1
            )
        res = membership_inference(s, members, m_labels, x_test, y_test, rng=0)
        rows.append(
            ["non-private" if e is None else e, f"{res.accuracy:.3f}", f"{res.advantage:+.3f}"]
        )
    report.append(
        table("Membership inference (L=16, b=12)", ["epsilon", "attack acc", "advantage"], rows)
    )

    text = "\n".join(report)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "datastore.md").write_text(text)


if __name__ == "__main__":
    main()
