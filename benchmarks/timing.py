"""What wall time tells a caller with a stopwatch: D against D + x, per entry point and engine.

For each entry point (``PrivateRAG.answer``, ``DPRAGChain.invoke``,
``DPQueryEngine.query``) and engine (``eager``: ``HFTokenModel`` on the shipped reader
under DPVote; ``static``: the same on the static engine, PrivateRAG only; ``hosted``: a
hosted text API double under DPAnswerVote, answering at once, through a text model of
the app's own, ``LangChainTextModel`` or ``LlamaIndexTextModel``) and each kind of x
(``long``: a 20 000-word record that wins retrieval; ``refused``: a record the hosted
API refuses, HTTP 400; ``cell``: one unit of ``--cell-records`` records, default the
partition's bound on one unit's records (``max_unit_records``, 256), all in one cell the
question probes and all below D's records in score, in a partitioned
corpus of 4008 records, 384 dimensions, 16 public cells, 2 probed: dprag's own
``FaissCorpus(partition=...)`` under ``PrivateRAG``, LangChain's ``FAISS`` store over
the partition's index under ``DPRAGChain``), the script times ``--n`` queries on D and
on D + x (interleaved, so drift in the machine's load falls on both) and ``--n`` more on
D (the control, D against D), and prints the accuracy of the best threshold on time
telling the two sides apart. The threshold and its direction are fitted on one random
half of each side and the accuracy is measured on the other half, so a control with no
signal reads about 0.50 (not the optimistic in-sample maximum).

Then the same cells with the deadline mode on (:mod:`dprag_core.deadline`): the deadline
is 1.5 x the 99th percentile of the query times measured without it (rounded up to 10
ms: a public number an operator reads off this table), and the table adds the accuracy
with it, the overruns (queries that met the deadline unfinished: the fixed failure) and
the cost, the median latency added.

    PYTHONPATH=. .venv/bin/python benchmarks/timing.py [--n 200] [--only core] [--out DIR]
        [--cells langchain:eager:long ...] [--cell-records 256] [--max-unit-records 256]

A unit of more records than the partition's ``max_unit_records`` is refused when it is
added; ``--max-unit-records`` raises that public bound (the opted-out case: time can then
show up to that many records of one unit).

Torch runs one thread. The eager engine runs its default prefill, one batched forward
over the public width (``--prefill padded``, what the static engine computes too):
every row's prefill costs the same, whatever it holds. ``--prefill rows`` runs its
opt-in ``prefill="rows"`` instead, each row's own tokens (its work follows the rows'
token counts), and ``--prefill padded-rows`` each row alone at the public width
(``_prefills.prefill_rows_padded``, the same work whatever the rows hold, in B calls).
``--quick``: n = 6 and one or two cells per entry point (a smoke run,
no figures). The figures depend on the machine and its load: compare a row's accuracy
with its control, measured side by side."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from langchain_core.callbacks import (  # noqa: E402
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.retrievers import BaseRetriever as LCRetriever  # noqa: E402
from llama_index.core.base.base_retriever import BaseRetriever as LIRetriever  # noqa: E402
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from dprag_core.accounting.accountant import InMemoryCorpusAccountant  # noqa: E402
from dprag_core.algorithms import DPAnswerVote, DPVote  # noqa: E402
from dprag_core.budget import Budget  # noqa: E402
from dprag_core.eval.workbench import reader_path  # noqa: E402
from dprag_core.models import hf_cache  # noqa: E402
from dprag_core.models.hf import ENGINES, HFTokenModel, Prefill  # noqa: E402
from dprag_core.pipeline import PrivateRAG  # noqa: E402
from dprag_core.retrieval.capabilities import HonoursK  # noqa: E402
from dprag_core.retrieval.cells import PublicPartition  # noqa: E402
from dprag_core.retrieval.documents import ScoredDocument  # noqa: E402
from dprag_core.retrieval.faiss_corpus import FaissCorpus  # noqa: E402
from dprag_core.retrieval.unit_records import DEFAULT_MAX_UNIT_RECORDS  # noqa: E402
from langchain_dprag import DPRAGChain, LangChainTextModel  # noqa: E402
from langchain_dprag.cells import partitioned_faiss  # noqa: E402
from llamaindex_dprag import DPQueryEngine, LlamaIndexTextModel  # noqa: E402

sys.path[:0] = [str(ROOT / "benchmarks")]
from _prefills import prefill_rows_padded  # noqa: E402

QUESTION = "Which drug treats Snurfosis?"
MARKER = "<|endoftext|>"
FILLER = "The clinic keeps a record of each visit, the dosage and the follow-up date."
Row = tuple[str, str, str]  # id, unit, text
D: list[Row] = [
    (f"r{i}", f"u{i}", f"Patient {i}: Snurfosis is treated with Gleeblorazine. {FILLER}")
    for i in range(8)
]
X: dict[str, Row] = {  # each ranks first in D + x
    "long": ("x", "ux", " ".join(["visit"] * 20_000) + " Snurfosis: Gleeblorazine."),
    "refused": ("x", "ux", f"{MARKER} Snurfosis is treated with Gleeblorazine."),
}

# x = "cell": a partitioned corpus (a public partition of DIM-dimensional space into
# N_CELLS cells, PROBES probed per question) holding D's 8 records near the question and
# BACKGROUND records spread over every cell; x is one unit of --cell-records records, all
# in one cell the question probes and all below D's records in score (the answer and
# the retrieved documents stay D's: only the scan of that cell grows).
DIM, N_CELLS, PROBES, BACKGROUND = 384, 16, 2, 4_000


class Space:
    """The vectors of the "cell" corpora: the question's, D's, the background's, x's."""

    def __init__(self, records: int, bound: int = DEFAULT_MAX_UNIT_RECORDS, seed: int = 5) -> None:
        rng = np.random.default_rng(seed)
        self.partition = PublicPartition.random(
            dim=DIM, cells=N_CELLS, probes=PROBES, seed=seed, max_unit_records=bound
        )
        self.query = _unit(rng.standard_normal(DIM))
        spread = 1 / math.sqrt(DIM)  # noise of norm about 1
        near = _unit(self.query + 0.2 * spread * rng.standard_normal((len(D), DIM)))
        far = _unit(rng.standard_normal((BACKGROUND, DIM)))
        self.d: list[tuple[Row, Any]] = [(row, v) for row, v in zip(D, near, strict=True)]
        self.d += [((f"b{i}", f"ub{i}", f"Record {i}: {FILLER}"), v) for i, v in enumerate(far)]
        cell = self.partition.probe(self.query)[0]
        centroid = self.partition.centroids[cell]
        below = min(float(v @ self.query) for v in near)
        x = np.zeros((0, DIM))
        while len(x) < records:  # x's records: in the probed cell, below D's in score
            v = _unit(centroid + spread * rng.standard_normal((records, DIM)))
            keep = (self.partition.assign(v) == cell) & (v @ self.query < below)
            x = np.concatenate([x, v[keep]])
        self.x = [((f"x{i}", "ux", f"Visit {i}: {FILLER}"), v) for i, v in enumerate(x[:records])]

    def embed(self, text: str) -> Any:
        """The question's vector (the only text embedded at query time)."""
        return self.query


def _unit(v: Any) -> Any:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


class TableEmbeddings(Embeddings):
    """LangChain embeddings: each record's text embeds as its vector, the question as its."""

    def __init__(self, table: dict[str, list[float]], query: list[float]) -> None:
        self.table, self.query = table, query

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.query


def _reply(prompt: str) -> str:
    if MARKER in prompt:
        raise ValueError("HTTP 400 content_filter")
    return "Gleeblorazine" if "Gleeblorazine" in prompt else "I do not know"


class OwnApi:
    """A hosted text API through a TextModel of the app's own (one call per prompt)."""

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int = 64) -> list[str]:
        return [_reply(p) for p in prompts]


class ApiChat(BaseChatModel):
    """A hosted chat API as a LangChain chat model."""

    @property
    def _llm_type(self) -> str:
        return "hosted-double"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = AIMessage(content=_reply(str(messages[-1].content)))
        return ChatResult(generations=[ChatGeneration(message=reply)])


class ApiLLM(CustomLLM):
    """A hosted completion API as a LlamaIndex LLM."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="hosted-double")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=_reply(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class LCRank(LCRetriever):
    """The first k of a fixed ranking."""

    rows: list[Any]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        return [Document(page_content=t, id=i, metadata={"who": u}) for i, u, t in self.rows[:k]]


class LIRank(LIRetriever):
    """A fixed ranking, all of it."""

    def __init__(self, rows: list[Row]) -> None:
        super().__init__()
        self.rows = rows

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(id_=i, text=t, metadata={"who": u}), score=0.9 - n / 100)
            for n, (i, u, t) in enumerate(self.rows)
        ]


_READERS: dict[str, HFTokenModel] = {}
#: The eager engine's ``prefill=`` (``--prefill``; ``padded-rows`` runs "rows" with
#: ``hf_cache.prefill_rows`` replaced).
EAGER_PREFILL: list[Prefill] = ["padded"]


def _mechanism(engine: str, entry: str) -> Any:
    if engine in ENGINES:  # an HFTokenModel engine; "hosted": the user's own chat API
        if engine not in _READERS:
            prefill = EAGER_PREFILL[0] if engine == "eager" else "padded"
            _READERS[engine] = HFTokenModel.from_pretrained(
                str(reader_path()), engine=engine, prefill=prefill
            )
        return DPVote(
            _READERS[engine], m=4, k=1, epsilon=20.0, delta=1e-4, epsilon_token=5.0,
            max_new_tokens=8,
        )  # fmt: skip
    model: Any = {
        "core": OwnApi,
        "langchain": lambda: LangChainTextModel(ApiChat()),
        "llamaindex": lambda: LlamaIndexTextModel(ApiLLM()),
    }[entry]()
    return DPAnswerVote(model, m=4, k=1, epsilon=8.0, delta=1e-4, max_new_tokens=16)


def _budget() -> InMemoryCorpusAccountant:
    return InMemoryCorpusAccountant(Budget(1e9, 0.5))


def build(entry: str, engine: str, rows: list[Row], deadline: float | None) -> Callable[[], Any]:
    """One app over ``rows`` (best first); the call that asks it one question."""
    mech = _mechanism(engine, entry)
    if entry == "core":
        docs = [ScoredDocument(i, t, 0.9 - n / 100, unit=u) for n, (i, u, t) in enumerate(rows)]
        rag = PrivateRAG(
            mech, HonoursK(lambda q, k: docs[:k]), accountant=_budget(), deadline=deadline
        )
        return lambda: rag.answer(QUESTION)
    if entry == "langchain":
        chain = DPRAGChain(
            retriever=LCRank(rows=rows),
            retriever_honours_k=True,
            mechanism=mech,
            unit_key="who",
            accountant=_budget(),
            deadline=deadline,
        )
        return lambda: chain.invoke(QUESTION)
    engine_ = DPQueryEngine.from_retriever(
        LIRank(rows),
        mechanism=mech,
        returns_everything=True,
        unit_key="who",
        budget=_budget(),
        deadline=deadline,
    )
    return lambda: engine_.query(QUESTION)


Records = list[tuple[Row, Any]]  # (id, unit, text) and its vector


def build_cells(
    entry: str, engine: str, space: Space, records: Records, deadline: float | None
) -> Callable[[], Any]:
    """One app over a partitioned corpus of ``records``; the call that asks it one question.

    ``core``: dprag's own ``FaissCorpus(partition=...)``; ``langchain``: LangChain's
    ``FAISS`` store over the partition's index (``langchain_dprag.cells.partitioned_faiss``).
    """
    mech = _mechanism(engine, entry)
    vectors = np.array([v for _, v in records])
    if entry == "core":
        corpus = FaissCorpus(dim=DIM, partition=space.partition)
        corpus.add(
            [i for (i, _, _), _ in records],
            [t for (_, _, t), _ in records],
            vectors,
            units=[u for (_, u, _), _ in records],
        )
        rag = PrivateRAG(
            mech, corpus.as_retriever(space.embed), accountant=_budget(), deadline=deadline
        )
        return lambda: rag.answer(QUESTION)
    table = {t: v.tolist() for ((_, _, t), v) in records}
    store = partitioned_faiss(
        [Document(t, metadata={"who": u}) for (_, u, t), _ in records],
        TableEmbeddings(table, space.query.tolist()),
        space.partition,
        ids=[i for (i, _, _), _ in records],
        unit_key="who",
    )
    chain = DPRAGChain(
        vectorstore=store,
        partition=space.partition,
        mechanism=mech,
        unit_key="who",
        accountant=_budget(),
        deadline=deadline,
    )
    return lambda: chain.invoke(QUESTION)


def timed(ask: Callable[[], Any]) -> tuple[float, bool]:
    """Wall seconds of one query, and whether it failed."""
    start = time.perf_counter()
    try:
        ask()
        failed = False
    except Exception:
        failed = True
    return time.perf_counter() - start, failed


def sample(apps: dict[str, Callable[[], Any]], n: int, rng: np.random.Generator) -> dict[str, Any]:
    """``n`` timed queries per app, interleaved in a fresh random order each round."""
    times: dict[str, list[float]] = {name: [] for name in apps}
    failures = dict.fromkeys(apps, 0)
    for ask in apps.values():  # warm-up, not timed
        timed(ask)
    for _ in range(n):
        for name in rng.permutation(list(apps)):
            took, failed = timed(apps[name])
            times[name].append(took)
            failures[name] += failed
    return {"times": times, "failures": failures}


def holdout_accuracy(a: Sequence[float], b: Sequence[float], rng: np.random.Generator) -> float:
    """Accuracy, on held-out halves, of the best threshold on time telling ``a`` from ``b``.

    >>> round(holdout_accuracy([1.0] * 10, [2.0] * 10, np.random.default_rng(0)), 2)
    1.0
    """
    xa, xb = rng.permutation(np.asarray(a)), rng.permutation(np.asarray(b))
    fit_a, test_a = xa[: len(xa) // 2], xa[len(xa) // 2 :]
    fit_b, test_b = xb[: len(xb) // 2], xb[len(xb) // 2 :]
    best = (-1.0, 0.0, 1)
    for t in np.concatenate([fit_a, fit_b]):
        for sign in (1, -1):  # 1: a is at or below the threshold
            score = (np.mean(sign * fit_a <= sign * t) + np.mean(sign * fit_b > sign * t)) / 2
            if score > best[0]:
                best = (float(score), float(t), sign)
    _, t, sign = best
    return float((np.mean(sign * test_a <= sign * t) + np.mean(sign * test_b > sign * t)) / 2)


def cell(
    entry: str,
    engine: str,
    kind: str,
    n: int,
    rng: np.random.Generator,
    records: int,
    bound: int = DEFAULT_MAX_UNIT_RECORDS,
) -> dict[str, Any]:
    """One row: without and with the deadline (x = "cell": ``records`` records in a probed cell,
    in a partition whose ``max_unit_records`` is ``bound``)."""
    if kind == "cell":
        space = Space(records, bound)

        def apps_for(deadline: float | None) -> dict[str, Callable[[], Any]]:
            return {
                "D": build_cells(entry, engine, space, space.d, deadline),
                "D+x": build_cells(entry, engine, space, space.d + space.x, deadline),
                "D'": build_cells(entry, engine, space, space.d, deadline),
            }
    else:
        with_x = [X[kind], *D]

        def apps_for(deadline: float | None) -> dict[str, Callable[[], Any]]:
            return {
                "D": build(entry, engine, D, deadline),
                "D+x": build(entry, engine, with_x, deadline),
                "D'": build(entry, engine, D, deadline),
            }

    plain = sample(apps_for(None), n, rng)
    t = plain["times"]
    slow = float(np.quantile(np.concatenate(list(t.values())), 0.99))
    deadline = math.ceil(slow * 1.5 / 0.01) * 0.01
    held = sample(apps_for(deadline), n, rng)
    h = held["times"]
    return {
        "median_d": statistics.median(t["D"]),
        "median_x": statistics.median(t["D+x"]),
        "accuracy": holdout_accuracy(t["D"], t["D+x"], rng),
        "control": holdout_accuracy(t["D"], t["D'"], rng),
        "failures": plain["failures"],
        "deadline": deadline,
        "held_accuracy": holdout_accuracy(h["D"], h["D+x"], rng),
        "held_control": holdout_accuracy(h["D"], h["D'"], rng),
        "overruns": sum(held["failures"].values()),
        "added": statistics.median(h["D"] + h["D+x"]) - statistics.median(t["D"] + t["D+x"]),
    }


CELLS = [
    ("core", "eager", "long"),
    ("core", "static", "long"),
    ("core", "hosted", "long"),
    ("core", "hosted", "refused"),
    ("langchain", "eager", "long"),
    ("langchain", "hosted", "long"),
    ("langchain", "hosted", "refused"),
    ("llamaindex", "eager", "long"),
    ("llamaindex", "hosted", "long"),
    ("llamaindex", "hosted", "refused"),
    ("core", "hosted", "cell"),
    ("langchain", "hosted", "cell"),
]
QUICK = [
    ("core", "eager", "long"),
    ("langchain", "hosted", "refused"),
    ("llamaindex", "hosted", "long"),
    ("langchain", "hosted", "cell"),
]

HEADER = (
    "| entry point | engine | x | median D / D+x (ms) | accuracy | control | failures D / D+x "
    "| deadline (ms) | accuracy held | control held | overruns | added latency (ms) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="queries per side (default 200)")
    parser.add_argument("--quick", action="store_true", help="n = 6, four cells (smoke)")
    parser.add_argument("--only", nargs="*", default=None, help="entry points or engines")
    parser.add_argument(
        "--cells", nargs="*", default=None, help="entry:engine:x, e.g. core:eager:long"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefill",
        choices=("padded", "rows", "padded-rows"),
        default="padded",
        help="the eager engine's prefill (default padded: one forward over the public width)",
    )
    parser.add_argument(
        "--cell-records",
        type=int,
        default=DEFAULT_MAX_UNIT_RECORDS,
        help=f"x = cell: how many records x adds to a probed cell (default "
        f"{DEFAULT_MAX_UNIT_RECORDS}, the default bound on one unit's records)",
    )
    parser.add_argument(
        "--max-unit-records",
        type=int,
        default=DEFAULT_MAX_UNIT_RECORDS,
        help=f"x = cell: the partition's public bound on one unit's records (default "
        f"{DEFAULT_MAX_UNIT_RECORDS}); raise it to measure a unit of more records",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write DIR/table.md")
    args = parser.parse_args()
    if args.n < 2:
        parser.error("--n must be an integer >= 2")
    if args.cell_records < 1:
        parser.error("--cell-records must be an integer >= 1")
    if args.max_unit_records < 1:
        parser.error("--max-unit-records must be an integer >= 1")
    if args.cell_records > args.max_unit_records:
        parser.error(
            f"--cell-records {args.cell_records} is more than --max-unit-records "
            f"{args.max_unit_records}: the partition refuses such a unit; pass "
            f"--max-unit-records {args.cell_records} to measure it (the bound raised)"
        )
    n = 6 if args.quick else args.n
    cells = QUICK if args.quick else CELLS
    if args.only:
        cells = [c for c in cells if c[0] in args.only or c[1] in args.only]
    if args.cells:
        cells = [c for c in cells if ":".join(c) in args.cells]
    rng = np.random.default_rng(args.seed)
    torch.set_num_threads(1)  # one core per query, as on a shared host (and steadier figures)
    EAGER_PREFILL[0] = "padded" if args.prefill == "padded" else "rows"
    if args.prefill == "padded-rows":
        hf_cache.prefill_rows = prefill_rows_padded  # each row alone, at the public width
    lines = [f"n = {n} queries per side; accuracy on held-out halves (0.50: time tells nothing)"]
    if any(kind == "cell" for _, _, kind in cells):
        lines.append(
            f"x = cell: {args.cell_records} records of one unit in a probed cell; "
            f"max_unit_records = {args.max_unit_records}"
        )
    lines.append(HEADER)
    print("\n".join(lines), flush=True)
    for entry, engine, kind in cells:
        r = cell(entry, engine, kind, n, rng, args.cell_records, args.max_unit_records)
        line = (
            f"| {entry} | {engine} | {kind} | {r['median_d'] * 1e3:.1f} / "
            f"{r['median_x'] * 1e3:.1f} | {r['accuracy']:.2f} | {r['control']:.2f} | "
            f"{r['failures']['D']} / {r['failures']['D+x']} | {r['deadline'] * 1e3:.0f} | "
            f"{r['held_accuracy']:.2f} | {r['held_control']:.2f} | {r['overruns']} | "
            f"{r['added'] * 1e3:.1f} |"
        )
        lines.append(line)
        print(line, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
