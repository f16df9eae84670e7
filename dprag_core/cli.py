"""The dprag command: the offline demo, and the ledger commands.

dprag demo runs offline: it generates a synthetic private corpus of fictional
patients (invented diseases and treatments no model knows), indexes it with
MiniLM embeddings (sha256-checked) in FAISS, and answers a few questions with
non-RAG, non-private RAG, DPSparseVote (per token and per word), DP-KSA,
DPAnswerVote (one decision per whole answer, text only) and MuRAG through
PrivateRAG, printing each answer with its (epsilon, delta) and its time, and
marking an answer whose text came from the model alone, not the records. The
DP mechanisms share one durable corpus-level accountant; MuRAG charges its
per-patient ledger; both live in a temporary folder, removed at the end (the
corpus is made anew by every run). --model takes any transformers
model name or path (default: the project's reader LM). dprag ledger creates,
shows and exports budgets. dprag diagnose (NOT private, for the data owner only)
shows per question how many DPAnswerVote voters agree on the top answer and the
bar h-bottom that count must clear at the chosen epsilon: why an answer is empty.
"""  # the command's --help text: plain text, no markup

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dprag_core.accounting.accountant import CorpusAccountant
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.ledger_cli import add_ledger_command
from dprag_core.validation import argument_int, argument_number, missing_extra

if TYPE_CHECKING:
    from dprag_core.algorithms.base import Mechanism
    from dprag_core.eval.synthetic import QAItem, SyntheticCorpus
    from dprag_core.eval.workbench import CorpusIndex

__all__ = ["main"]

_DELTA = 1e-4
_TOKENS = 16  # a phone number is 13 tokens + EOS


@dataclass(frozen=True)
class _Entry:
    label: str
    mechanism: Mechanism
    accountant: CorpusAccountant | None


def _pick_questions(corpus: SyntheticCorpus, n: int) -> list[QAItem]:
    """Questions about the best-supported facts first, cycling treatment/disease/phone."""
    by_kind = {
        kind: sorted(corpus.questions_of(kind), key=lambda q: -q.support)
        for kind in ("treatment", "disease", "phone")
    }
    order = ("treatment", "disease", "phone")
    picked: list[QAItem] = []
    i = 0
    while len(picked) < n:
        kind = order[i % 3]
        pool = by_kind[kind]
        if i // 3 < len(pool):
            picked.append(pool[i // 3])
        i += 1
    return picked


def _mechanisms(args: argparse.Namespace, n_questions: int, state: str) -> list[_Entry]:
    from dprag_core.accounting.corpus_sqlite import SQLiteCorpusAccountant
    from dprag_core.accounting.ledger import SQLiteLedger
    from dprag_core.algorithms.answer_vote import DPAnswerVote
    from dprag_core.algorithms.baselines import RAG, NonRAG
    from dprag_core.algorithms.dpvote import DPSparseVote
    from dprag_core.algorithms.ksa import DPKSA
    from dprag_core.algorithms.murag import MuRAG
    from dprag_core.eval.workbench import load_models

    token_model, text_model = load_models(args.model)
    eps, m = args.epsilon, args.voters
    # One durable corpus-level budget for the four per-query DP mechanisms: every question,
    # no more (the token-level DPSparseVote is pure: three of them spend delta).
    total = Budget(4 * eps * n_questions, 3 * _DELTA * n_questions)
    accountant = SQLiteCorpusAccountant(state, total=total, create=True)

    def sparse_vote() -> DPSparseVote:
        # The pure-ε variant: at demo budgets LimitedDomain's δ-threshold (non-monotone
        # votes) exceeds the number of voters and would stop every answer at once.
        return DPSparseVote(
            token_model,
            m=m,
            k=1,
            epsilon=eps,
            delta=0.0,
            epsilon_token=eps * args.token_share,
            selection="exponential",
            max_new_tokens=_TOKENS,
        )

    # Word-level DPSparseVote: one private decision per word (an invented drug name is
    # 3-6 tokens but one word); LimitedDomain, so (eps, delta).
    words = DPSparseVote(
        token_model,
        m=m,
        k=1,
        epsilon=eps,
        delta=_DELTA,
        epsilon_token=eps * args.word_share,
        max_new_tokens=_TOKENS,
        unit="word",
    )
    ksa = DPKSA(
        text_model,
        epsilon=eps,
        delta=_DELTA,
        n_docs=m,
        k_max=5,
        response_tokens=_TOKENS,
        answer_tokens=_TOKENS,
    )
    # One decision per answer: each voter's whole answer, text only (any chat model).
    answers = DPAnswerVote(text_model, m=m, k=1, epsilon=eps, delta=_DELTA, max_new_tokens=_TOKENS)
    # MuRAG: a per-patient ledger (each patient may take part in every question once).
    ledger = SQLiteLedger(state, budget_per_unit=eps * n_questions, create=True)
    murag = MuRAG(sparse_vote(), ledger=ledger, tau=args.tau, epsilon_query=eps, k=m)
    return [
        _Entry("NonRAG", NonRAG(token_model, max_new_tokens=_TOKENS), None),
        _Entry("RAG (k=3)", RAG(token_model, k=3, max_new_tokens=_TOKENS), None),
        _Entry("DPSparseVote", sparse_vote(), accountant),
        _Entry("DPSV (words)", words, accountant),
        _Entry("DP-KSA", ksa, accountant),
        _Entry("DPAnswerVote", answers, accountant),
        _Entry("MuRAG", murag, None),
    ]


def _fmt_eps(answer: DPAnswer) -> str:
    eps, delta = answer.epsilon, answer.delta
    e = "inf" if math.isinf(eps) else f"{eps:.3g}"
    return f"eps={e:<5} delta={delta:<7.2g}"


def _demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import tqdm  # noqa: F401
    except ImportError as missing:
        raise missing_extra("dprag demo", missing, extra="demo") from missing

    from dprag_core.eval.embeddings import MiniLMEmbedder
    from dprag_core.eval.synthetic import make_corpus
    from dprag_core.eval.workbench import CorpusIndex, reader_path

    corpus = make_corpus(n_diseases=10, max_support=2 * args.voters, seed=args.seed, world=0)
    print(
        f"dprag demo: {len(corpus.records)} fictional patient records (private corpus, "
        f"seed {args.seed}); invented diseases such as {corpus.diseases[0]}"
    )
    t0 = time.perf_counter()
    embedder = MiniLMEmbedder()
    vectors = embedder.encode(corpus.texts(), show_progress=True)
    index = CorpusIndex(corpus.ids(), corpus.texts(), embedder, vectors=vectors)
    print(
        f"indexed with all-MiniLM-L6-v2 (sha256 verified) in FAISS IndexFlatIP "
        f"({time.perf_counter() - t0:.1f}s)"
    )
    questions = _pick_questions(corpus, args.questions)
    print(f"model: {args.model or reader_path()}")
    if args.state:  # the user's own budget file: kept
        return _answer_all(args, questions, index, str(Path(args.state).absolute()))
    with tempfile.TemporaryDirectory(prefix="dprag-demo-") as folder:  # removed at the end
        return _answer_all(args, questions, index, os.path.join(folder, "budget.db"))


def _answer_all(
    args: argparse.Namespace, questions: list[QAItem], index: CorpusIndex, state: str
) -> int:
    """Every question through every mechanism, the budget and the ledger kept in ``state``."""
    from tqdm import tqdm

    from dprag_core.eval.metrics import match
    from dprag_core.pipeline import PrivateRAG
    from dprag_core.stop_reasons import shown_text

    entries = _mechanisms(args, len(questions), state)
    where = "the file" if args.state else "a temporary file, removed at the end:"
    print(f"corpus budget and MuRAG's per-patient ledger: {where} {state}")
    print(
        f"per-query epsilon {args.epsilon:g} for DPSparseVote, DPSV (words) (DPSparseVote "
        "deciding per word instead of per token), DP-KSA, DPAnswerVote (one decision per "
        "answer) and MuRAG\n"
    )
    rng = args.noise_seed  # None: OS entropy, as in production
    for qi, item in enumerate(questions, 1):
        print(f"Q{qi}: {item.question}")
        print(f"    gold: {item.answer}  ({item.support} supporting record(s))")
        for entry in tqdm(entries, desc=f"Q{qi}", leave=False, unit="mechanism", disable=None):
            app = PrivateRAG(entry.mechanism, index, accountant=entry.accountant)
            start = time.perf_counter()
            try:
                answer = app.answer(item.question, rng=rng)
            except PrivacyBudgetExhausted as exc:
                tqdm.write(f"    {entry.label:<13} refused: {exc}")
                continue
            took = time.perf_counter() - start
            ok = "ok" if match(answer.text, item.answer) else "--"
            text = shown_text(" ".join(answer.text.split())[:40], answer.details)
            tqdm.write(f"    {entry.label:<13} {_fmt_eps(answer)} {took:5.2f}s  [{ok}] {text}")
            if rng is not None:
                rng += 1
        print()
    budget = next(e.accountant for e in entries if e.label == "DPSparseVote")
    if budget is not None:
        print(f"corpus budget (DPSparseVote + DPSV (words) + DP-KSA + DPAnswerVote): {budget!r}")
    print("MuRAG's epsilon is each patient's total over all questions (its ledger budget).")
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    """``dprag diagnose``: DPAnswerVote's voters on the owner's records, counted (NOT private)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import sentence_transformers  # noqa: F401
    except ImportError as missing:
        raise missing_extra("dprag diagnose", missing, extra="demo") from missing

    from dprag_core.algorithms.answer_diagnosis import NOT_PRIVATE, diagnose
    from dprag_core.algorithms.answer_vote import DPAnswerVote
    from dprag_core.eval.embeddings import MiniLMEmbedder
    from dprag_core.eval.workbench import CorpusIndex, load_models

    ids, texts = _read_records(Path(args.records))
    print(NOT_PRIVATE)
    index = CorpusIndex(ids, texts, MiniLMEmbedder())
    _, text_model = load_models(args.model)
    mechanism = DPAnswerVote(
        text_model,
        m=args.voters,
        k=args.k,
        epsilon=args.epsilon,
        delta=args.delta,
        max_new_tokens=args.max_new_tokens,
    )
    print(
        f"{len(ids)} records; DPAnswerVote m={args.voters} k={args.k} epsilon={args.epsilon:g} "
        f"delta={args.delta:g}: an answer is released when its voters' count, plus noise, "
        f"beats the bar h⊥ = {mechanism.bar():.1f}, plus noise"
    )
    for question in args.question:
        docs = index(question, mechanism.candidates_needed())
        print(diagnose(mechanism, question, docs, rng=args.seed).line())
    print(NOT_PRIVATE)
    return 0


def _read_records(path: Path) -> tuple[list[str], list[str]]:
    """``(ids, texts)`` of a JSON-lines file: one ``{"text": ..., "id": ...}`` per line."""
    import json

    ids, texts = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise SystemExit(f"dprag diagnose: --records line {n} has no string 'text' field")
        ids.append(str(record.get("id", n)))
        texts.append(record["text"])
    if not texts:
        raise SystemExit("dprag diagnose: --records holds no record")
    return ids, texts


def _add_diagnose_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    diag = sub.add_parser(
        "diagnose",
        help="NOT PRIVATE, data owner only: why DPAnswerVote answers are empty",
        description="NOT PRIVATE, for the data owner only: runs DPAnswerVote's voters on the "
        "records and prints, per question, how many voters agree on the top answer key and "
        "the bar h-bottom that count must clear at the chosen epsilon. Spends no budget; "
        "never show its output to whoever asks the questions.",
    )
    diag.add_argument(
        "--records", required=True, help='JSON-lines file, one {"text": ..., "id": ...} a line'
    )
    diag.add_argument(
        "--question", action="append", required=True, help="a question (repeat for more)"
    )
    diag.add_argument("--model", default=None, help="HF model name or path (default: reader)")
    diag.add_argument("--epsilon", type=_positive_float, default=5.0, help="per-query epsilon")
    diag.add_argument("--delta", type=_probability, default=_DELTA, help="per-query delta")
    diag.add_argument("--voters", type=_positive_int, default=40, help="voters m")
    diag.add_argument("--k", type=_positive_int, default=1, help="records per voter")
    diag.add_argument("--max-new-tokens", type=_positive_int, default=32, help="answer length")
    diag.add_argument("--seed", type=int, default=0, help="seed of the voters' partition")
    diag.set_defaults(func=_diagnose)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dprag`` console script.

    >>> main(["demo", "--questions", "1"])  # doctest: +SKIP
    0
    """
    parser = argparse.ArgumentParser(prog="dprag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline demo")
    demo.add_argument("--model", default=None, help="HF model name or path (default: reader)")
    demo.add_argument("--questions", type=_positive_int, default=3, help="how many questions")
    demo.add_argument("--seed", type=int, default=0, help="seed of the synthetic corpus")
    demo.add_argument(
        "--state",
        default=None,
        help="SQLite file of the corpus budget and MuRAG's ledger (default: a new temporary "
        "file, since the synthetic corpus is made anew by every run)",
    )
    demo.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="seed the DP noise (reproducible runs only; default: OS entropy)",
    )
    demo.add_argument("--epsilon", type=_positive_float, default=8.0, help="per-query epsilon")
    demo.add_argument("--voters", type=_positive_int, default=40, help="voters / KSA responses")
    demo.add_argument(
        "--token-share",
        type=_share,
        default=1 / 5,
        help="DPSparseVote's epsilon per private token, as a share of --epsilon "
        "(1/share private tokens per answer)",
    )
    demo.add_argument(
        "--word-share",
        type=_share,
        default=1 / 2,
        help="the same for the word-level DPSparseVote (epsilon per private word)",
    )
    demo.add_argument(
        "--tau",
        type=_cosine,
        default=0.4,
        help="MuRAG's public relevance threshold (MiniLM cosine; records that answer a "
        "question score about 0.4-0.65 here)",
    )
    demo.set_defaults(func=_demo)
    add_ledger_command(sub)
    _add_diagnose_command(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


_positive_int = argument_int(1)
_positive_float = argument_number("a finite number > 0", lambda v: v > 0)
_share = argument_number("a share in (0, 1]", lambda v: 0 < v <= 1)
_probability = argument_number("a probability in (0, 1)", lambda v: 0 < v < 1)
_cosine = argument_number("a cosine score in [-1, 1]", lambda v: -1 <= v <= 1)


if __name__ == "__main__":
    raise SystemExit(main())
