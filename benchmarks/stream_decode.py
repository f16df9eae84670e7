"""Streaming text decoding per released token: the bounded IncrementalDecoder vs re-decoding.

Every token-level mechanism streams its answer through
:class:`~dprag_core.algorithms._decoding.IncrementalDecoder`. Before issue 28
item 7, each push decoded every id of the answer so far (``Redecode`` below, the
old algorithm), so a push cost grew with the answer's length; now each push
decodes a window of a few tokens. This prints microseconds per pushed token for
answers of 64, 256 and 1024 tokens, both side by side in one run (median of
``--repeats``), with the shipped reader's tokenizer (``--tokenizer`` for another).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/stream_decode.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from dprag_core.algorithms._decoding import IncrementalDecoder  # noqa: E402
from dprag_core.eval.synthetic import make_corpus  # noqa: E402
from dprag_core.eval.workbench import reader_path  # noqa: E402
from dprag_core.models.codec import TokenizerCodec  # noqa: E402


class Redecode:
    """The decoder before the change: decode every id on each push, release the new tail."""

    def __init__(self, model: Any) -> None:
        self._model, self._ids, self._released = model, [], ""

    def push(self, token: int) -> str:
        self._ids.append(token)
        text = str(self._model.decode(self._ids))
        if text.endswith("\ufffd") or not text.startswith(self._released):
            return ""
        chunk, self._released = text[len(self._released) :], text
        return chunk


def per_token_us(kind: type[Any], codec: TokenizerCodec, ids: list[int], repeats: int) -> float:
    """Median microseconds per push over ``ids``."""
    times = []
    for _ in range(repeats):
        decoder = kind(codec)
        start = time.perf_counter()
        for token in ids:
            decoder.push(token)
        times.append((time.perf_counter() - start) / len(ids) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tokenizer", default=str(reader_path()))
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    codec = TokenizerCodec(AutoTokenizer.from_pretrained(args.tokenizer))
    text = " ".join(r.text for r in make_corpus(n_diseases=40, seed=0, world=0).records)
    ids = codec.encode(text)
    print(f"µs per pushed token (median of {args.repeats}); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'tokens':>6}  {'re-decode (before)':>18}  {'IncrementalDecoder':>18}  {'ratio':>6}")
    for n in args.lengths:
        if n > len(ids):
            sys.exit(f"--lengths: the text has {len(ids)} tokens")
        old = per_token_us(Redecode, codec, ids[:n], args.repeats)
        new = per_token_us(IncrementalDecoder, codec, ids[:n], args.repeats)
        print(f"{n:>6}  {old:>18.1f}  {new:>18.1f}  {old / new:>6.1f}")


if __name__ == "__main__":
    main()
