"""DP token voting on an OpenAI-compatible server vs the in-process engine: tokens per second.

Runs the same DP queries (DPVote, m voters + the public prompt, every voter
holding a record of the synthetic corpus) on :class:`OpenAICompatModel` against
an endpoint and on :class:`HFTokenModel` (the same checkpoint, in this process),
first one query at a time, then ``--concurrency`` queries in flight at once
(worker threads, as ``ainvoke`` / ``abatch`` / ``aquery`` run them; the server's
continuous batching merges their steps). Prints released tokens per second for
each and the ratio server / in-process, measured in this one run (the median of
``--repeats`` interleaved runs). Both sides must release the same tokens (their
transcripts are compared); a mismatch is reported.

Against the shipped reader on a local llama.cpp server (started here from the
binary scripts/build_llama_server.sh cached, on a free loopback port):

    .venv/bin/python benchmarks/server.py --serve-reader

Against any endpoint (the tokenizer and in-process model must be that checkpoint):

    .venv/bin/python benchmarks/server.py --base-url http://host:8000/v1 --model NAME \\
        --server vllm --hf-model PATH_OR_NAME [--api-key KEY]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

from dprag_core.algorithms import DPVote  # noqa: E402
from dprag_core.budget import DPAnswer  # noqa: E402
from dprag_core.eval.synthetic import make_corpus  # noqa: E402
from dprag_core.eval.workbench import reader_path  # noqa: E402
from dprag_core.models.base import TokenModel  # noqa: E402
from dprag_core.models.hf import HFTokenModel  # noqa: E402
from dprag_core.models.openai_compat import OpenAICompatModel  # noqa: E402
from dprag_core.retrieval import ScoredDocument  # noqa: E402

Query = tuple[str, list[ScoredDocument]]


def queries(n: int, m: int) -> list[Query]:
    """``n`` questions of the synthetic corpus, each with ``m`` supporting records."""
    corpus = make_corpus(n_diseases=max(2, n), supports=[m] * max(2, n), seed=3, world=0)
    by_id = {r.id: r for r in corpus.records}
    out = []
    for item in corpus.questions[:n]:
        docs = [by_id[i] for i in item.record_ids]
        out.append((item.question, [ScoredDocument(id=d.id, text=d.text, score=1.0) for d in docs]))
    return out


def answer(model: TokenModel, query: Query, m: int, tokens: int) -> tuple[str, int]:
    """One DPVote answer (generous budget: every step releases a token): (text, tokens)."""
    mech = DPVote(
        model, m=m, k=1, epsilon=1e3, delta=1e-4, epsilon_token=50.0, max_new_tokens=tokens
    )
    *_, final = mech.stream(*query, rng=0)
    assert isinstance(final, DPAnswer)
    return final.text, int(final.details["tokens_generated"])


def run(model: TokenModel, work: list[Query], m: int, tokens: int, concurrency: int) -> Any:
    """(released tokens per second, answers) for ``work`` with ``concurrency`` in flight."""
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(lambda q: answer(model, q, m, tokens), work))
    seconds = time.perf_counter() - start
    return sum(n for _, n in done) / seconds, [text for text, _ in done]


@contextmanager
def local_reader_server(slots: int, threads: int) -> Iterator[str]:
    """The shipped reader on a llama.cpp server on loopback (the tests' helper)."""
    from llama_server import convert_reader, find_binary, serve

    binary = find_binary()
    if binary is None:
        sys.exit("llama-server is not built: run scripts/build_llama_server.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        gguf = convert_reader(binary, reader_path(), Path(tmp))
        with serve(binary, gguf, Path(tmp), slots=slots, threads=threads) as url:
            yield url


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="the API root, e.g. http://host:8000/v1")
    where.add_argument("--serve-reader", action="store_true", help="start llama-server here")
    ap.add_argument("--model", default="reader", help="the served model's name")
    ap.add_argument("--server", default="llama.cpp", choices=["llama.cpp", "vllm", "sglang"])
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--hf-model", default=str(reader_path()), help="tokenizer + in-process model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--m", type=int, default=10, help="voters per query")
    ap.add_argument("--tokens", type=int, default=24, help="max new tokens per query")
    ap.add_argument("--queries", type=int, default=8, help="queries per measurement")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch's, and --serve-reader's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    local = HFTokenModel.from_pretrained(args.hf_model, device=args.device)
    work = queries(args.queries, args.m)

    def measure(url: str) -> None:
        served = OpenAICompatModel.from_pretrained(
            url, args.hf_model, model=args.model, server=args.server, api_key=args.api_key
        )
        print(f"endpoint {served.endpoint!r}; {args.queries} DPVote queries, m={args.m}, "
              f"<= {args.tokens} tokens each; median of {args.repeats}")  # fmt: skip
        for level in (1, args.concurrency):
            rates: dict[str, list[float]] = {"server": [], "in-process": []}
            for _ in range(args.repeats):
                here_rate, here = run(local, work, args.m, args.tokens, level)
                there_rate, there = run(served, work, args.m, args.tokens, level)
                rates["in-process"].append(here_rate)
                rates["server"].append(there_rate)
                differ = sum(a != b for a, b in zip(here, there, strict=True))
                if differ:
                    print(f"  MISMATCH: {differ} answers differ between server and in-process")
            s, h = (statistics.median(rates[k]) for k in ("server", "in-process"))
            print(f"{level:>2} in flight: server {s:8.1f} tok/s   in-process {h:8.1f} tok/s   "
                  f"ratio server/in-process {s / h:5.2f}")  # fmt: skip

    if args.serve_reader:
        with local_reader_server(args.concurrency * (args.m + 1), args.threads) as url:
            measure(url)
    else:
        measure(args.base_url)


if __name__ == "__main__":
    main()
