"""Time per generated token: weight-read floor, bare loop, generate, each DP mechanism.

Everything runs on the same m+1 left-padded prompts (m voters holding the *same*
document, so they agree and tokens are released, plus the public prompt), for
the same number of tokens, side by side in one process:

- ``weight-read floor``: the model's weight bytes / the device's measured copy
  bandwidth (``dst.copy_(src)`` of a large buffer): no decode step can be faster.
- ``bare cached greedy loop``: the engine's physical limit in HF eager: one
  batched prefill, then one [m+1, 1] forward per token with a ``DynamicCache``,
  argmax on the device and one host sync per token (as a DP loop needs).
- ``model.generate``: HF greedy generation of the same batch (each row its own token).
- per engine of ``HFTokenModel`` (``--engine``: the names of ``dprag_core.models.hf.ENGINES``;
  ``compiled`` compiles the shared model's blocks in place, so give it last):
  ``greedy loop`` (the engine's own session: prefill, then ``greedy()``/``step()``
  per token, no mechanism), ``DPVote (LD)``, ``DPSparseVote (LD)``,
  ``DPSparseVote (EM)``, the word-level ``DPVote (LD, words)`` and
  ``DPSparseVote (LD, words)`` (one lookahead per word: its cost per released
  token shows in the same columns), and ``HFTextModel.generate`` (DP-KSA's
  response generation) vs ``model.generate``.

``--unit`` picks the voting units measured (``token``, ``word``: both by default).
In-process engines have no speculative variant: a batched engine runs one
forward per step for all rows whether or not they agree (speculation saves
round trips, which only the server path has: ``benchmarks/server.py``).
``--clock cpu`` times with the process's CPU time instead of the wall clock, so
that ratios stay fair on a CPU shared with other jobs (CPU runs only).
``--model smollm2`` runs SmolLM2-135M-Instruct (the project's loader,
``dprag_core.eval.smollm2``) instead of the random presets: real tokenizer and
end ids, so a mechanism may stop before ``--tokens`` (its token count is printed
and costs are per decoded token of each run).

Prefill is timed separately, so the decode-only time per token is printed too;
ratios are decode-only against the HF bare loop, against the same engine's
greedy loop (what a mechanism adds to its engine) and against ``generate`` (and
HFTextModel.generate against generate, totals). Each measurement is repeated
``--repeats`` times, interleaved, and the median is printed. Models are
random-initialised from Llama configs (no downloads): ``tiny`` (tests),
``small`` (~12M, V=32k), ``llama100m`` (95M, V=32k), ``llama1b``
(Llama-3.2-1B shape, V=128k), ``llama8b`` (Llama-3.1-8B shape, V=128k);
``--vocab`` overrides V. No EOS exists (fixed-length runs).
The script imports the ``dprag_core`` of the checkout it lives in.

Run (CPU):  nice .venv/bin/python benchmarks/decode.py --preset small --tokens 32 --m 40
            nice .venv/bin/python benchmarks/decode.py --engine eager static --clock cpu
            nice .venv/bin/python benchmarks/decode.py --model smollm2 --engine eager static
Run (GPU):  .venv/bin/python benchmarks/decode.py --device cuda --dtype bfloat16 \\
                --preset llama1b --m 40 100 --tokens 48 --doc-chars 450 \\
                --engine eager cuda_graphs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from tiny_models import build_tokenizer  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

from dprag_core.algorithms import DPSparseVote, DPVote  # noqa: E402
from dprag_core.models.hf import ENGINES, HFTextModel, HFTokenModel, HFTokenSession  # noqa: E402
from dprag_core.models.hf_cache import cache_argument  # noqa: E402
from dprag_core.retrieval import ScoredDocument  # noqa: E402

#: hidden, intermediate, layers, heads, kv heads, vocab (None: the tokenizer's), tied
PRESETS: dict[str, tuple[int, int, int, int, int, int | None, bool]] = {
    "tiny": (64, 128, 2, 4, 2, None, True),
    "small": (256, 704, 4, 4, 4, 32_000, True),
    "llama100m": (768, 2048, 10, 12, 12, 32_000, True),
    "llama1b": (2048, 8192, 16, 32, 8, 128_256, True),
    "llama8b": (4096, 14336, 32, 32, 8, 128_256, False),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: ``--clock``: wall time, or the process's CPU time (fair ratios on a busy shared CPU)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = [time.perf_counter]


def now() -> float:
    """The chosen clock (``--clock``), in seconds."""
    return _clock[0]()


DOC = (
    "patient alice martin was diagnosed with migraine and treated with aspirin; bob durand "
    "has asthma and his doctor prescribed salbutamol twice a day; chloe takes metformin "
    "every morning for diabetes; the fever decreased after paracetamol. "
)


class WideTokenizer:
    """The tests' tokenizer presented with ``size`` tokens and no EOS (fixed-length runs).

    Ids past the real tokenizer decode as ``id % len(real)``: text is not the point here.
    """

    eos_token_id = None

    def __init__(self, inner: Any, size: int) -> None:
        self.inner, self.size = inner, size

    def __len__(self) -> int:
        return self.size

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        n = len(self.inner)
        return str(self.inner.decode([int(i) % n for i in ids], **kwargs))


class TimedPrefill:
    """Wraps an HFTokenModel; records the seconds of the last prefill."""

    def __init__(self, inner: HFTokenModel, sync: Callable[[], None]) -> None:
        self.inner, self.sync, self.seconds = inner, sync, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.inner.eos_token_ids

    def encode(self, text: str) -> list[int]:  # explicit: Python 3.12 protocols ignore __getattr__
        return self.inner.encode(text)

    def decode(self, ids: Any) -> str:
        return self.inner.decode(ids)

    def check_lookahead(self) -> None:
        self.inner.check_lookahead()

    def prefill(self, prompts: list[str]) -> HFTokenSession:
        start = now()
        session = self.inner.prefill(prompts)
        if hasattr(session, "greedy"):  # the first tokens are part of the prefill
            session.greedy()
        self.sync()
        self.seconds = now() - start
        return session


def build_model(preset: str, vocab: int, dtype: torch.dtype, device: str, tok: Any) -> Any:
    hidden, inter, layers, heads, kv, _, tied = PRESETS[preset]
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        tie_word_embeddings=tied,
        pad_token_id=tok.pad_token_id,
        eos_token_id=None,
        bos_token_id=None,
    )
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.eos_token_id = None
    return model.eval()


def copy_bandwidth(device: str, sync: Callable[[], None]) -> float:
    """Bytes per second of a device-to-device copy (each byte read once, written once)."""
    n = (1 << 30) if device != "cpu" else (1 << 27)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        sync()
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - start)
    return 2 * n / min(times)


def left_pad(rows: list[list[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def bare_loop(model: Any, ids: torch.Tensor, mask: torch.Tensor, n: int) -> tuple[float, float]:
    """(prefill s, total s): cached greedy decode, same token to every row, one sync per token."""
    start = now()
    cache = DynamicCache(config=model.config)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode():
        kw = {cache_argument(model): cache, "use_cache": True, "logits_to_keep": 1}
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **kw)
        token = int(out.logits[:, -1].argmax(-1).cpu()[0])
        prefill = now() - start
        ones = torch.ones((ids.shape[0], 1), dtype=mask.dtype, device=mask.device)
        position = positions[:, -1:]
        for _ in range(n - 1):
            mask = torch.cat([mask, ones], dim=1)
            position = position + 1
            step = torch.full_like(position, token)
            out = model(input_ids=step, attention_mask=mask, position_ids=position, **kw)
            token = int(out.logits[:, -1].argmax(-1).cpu()[0])
    return prefill, now() - start


def generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, n: int, pad: int) -> float:
    start = now()
    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=n,
            do_sample=False,
            top_k=None,
            top_p=None,
            temperature=None,
            eos_token_id=None,
            pad_token_id=pad,
            use_cache=True,
        )
    return now() - start


def mechanisms(bench: TimedPrefill, m: int, n: int, units: list[str]) -> dict[str, Any]:
    """The DP mechanisms with budgets that allow n private tokens (voters agree: released),
    for each unit of ``units`` (``token``: LD and EM selections; ``word``: LD)."""
    common = {"m": m, "k": 1, "epsilon": 60.0 * n, "epsilon_token": 50.0, "max_new_tokens": n}
    found: dict[str, Any] = {}
    if "token" in units:
        found["DPVote (LD)"] = DPVote(bench, delta=1e-4, **common)
        found["DPSparseVote (LD)"] = DPSparseVote(bench, delta=1e-4, **common)
        em = DPSparseVote(bench, delta=0.0, selection="exponential", **common)
        found["DPSparseVote (EM)"] = em
    if "word" in units:
        found["DPVote (LD, words)"] = DPVote(bench, delta=1e-4, unit="word", **common)
        found["DPSparseVote (LD, words)"] = DPSparseVote(bench, delta=1e-4, unit="word", **common)
    return found


def greedy_loop(bench: TimedPrefill, prompts: list[str], n: int) -> float:
    """Total s of the engine's own loop: prefill, then greedy()/step() per token (row 0's token)."""
    start = now()
    session = bench.prefill(prompts)
    for _ in range(n - 1):
        session.step(int(session.greedy()[0]))
    int(session.greedy()[0])
    return now() - start


def load_smollm2(dtype: torch.dtype, device: str) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct (model, tokenizer) through the project's one loader."""
    try:
        from dprag_core.eval.smollm2 import model_dir
    except ImportError as exc:  # the loader lands with the instruct reader (dprag_core.eval)
        raise SystemExit(f"--model smollm2 needs dprag_core.eval.smollm2: {exc}") from exc
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = str(model_dir())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval(), AutoTokenizer.from_pretrained(folder)


def run(args: argparse.Namespace, preset: str, m: int, tok: Any) -> None:
    device, n = args.device, args.tokens
    sync: Callable[[], None] = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    if preset == "smollm2":  # a real instruct model: its own tokenizer, vocabulary and end ids
        model, wide = load_smollm2(DTYPES[args.dtype], device)
        vocab = int(model.config.vocab_size)
    else:
        vocab = args.vocab or PRESETS[preset][5] or len(tok)
        wide = WideTokenizer(tok, vocab)
        model = build_model(preset, vocab, DTYPES[args.dtype], device, wide)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # "compiled" compiles the shared model's blocks in place: its phase comes last, and the
    # HF comparators (bare loop, generate) are measured in the first phase, on the plain model
    phases = [
        [e for e in args.engine if e != "compiled"],
        [e for e in args.engine if e == "compiled"],
    ]
    phases = [p for p in phases if p]
    engines: dict[str, TimedPrefill] = {}
    texts: dict[str, HFTextModel] = {}
    doc_text = (DOC * (1 + args.doc_chars // len(DOC)))[: args.doc_chars]
    docs = [ScoredDocument(id=f"d{i}", text=doc_text, score=1.0) for i in range(m)]
    question = "Which treatment did Alice Martin receive?"
    mechs: dict[str, dict[str, Any]] = {}
    probe = mechanisms(HFTokenModel(model, wide), m, n, ["token"])["DPSparseVote (EM)"]
    prompts = probe.prompts(question, [docs[:1]] * m)
    rows = [probe.model.prompt_ids(p) for p in prompts]
    ids, mask = left_pad(rows, probe.model.pad_token_id, device)

    results: dict[str, list[tuple[float, float, int]]] = {}
    private: dict[str, int] = {}
    generated: dict[str, int] = {}

    def record(name: str, prefill: float, total: float, tokens: int = n) -> None:
        results.setdefault(name, []).append((prefill, total, tokens))

    def once(phase: list[str], comparators: bool) -> None:
        if comparators:
            sync()
            record("bare cached greedy loop", *bare_loop(model, ids, mask, n))
            sync()
            pad = probe.model.pad_token_id
            first_token = generate(model, ids, mask, 1, pad)
            record("model.generate", first_token, generate(model, ids, mask, n, pad))
        for engine in phase:
            bench = engines[engine]
            sync()
            total = greedy_loop(bench, prompts, n)
            record(f"[{engine}] greedy loop", bench.seconds, total)
            for name, mech in mechs[engine].items():
                sync()
                start = now()
                answer = mech.answer(question, docs, rng=0)
                sync()
                made = int(answer.details["tokens_generated"])
                record(f"[{engine}] {name}", bench.seconds, now() - start, made)
                # fixed-length runs (no end id) except a real model's (--model smollm2)
                assert made == n or preset == "smollm2", answer.details
                private[f"[{engine}] {name}"] = int(answer.details["private_tokens"])
                generated[f"[{engine}] {name}"] = made
            sync()
            start = now()
            texts[engine].generate(prompts, max_new_tokens=n)
            sync()
            record(f"[{engine}] HFTextModel.generate", 0.0, now() - start)

    warm: dict[str, float] = {}
    for i, phase in enumerate(phases):
        for e in phase:
            engine_model = HFTokenModel(model, wide, engine=e, prompt_width=args.prompt_width)
            engines[e] = TimedPrefill(engine_model, sync)
            texts[e] = HFTextModel.on(engines[e].inner)
            mechs[e] = mechanisms(engines[e], m, n, args.unit)
        once(phase, comparators=i == 0)  # warm-up: allocator, kernels, capture, compilation
        warm.update({e: results.pop(f"[{e}] greedy loop")[0][1] for e in phase})
        for name in [k for k in results if k.startswith(tuple(f"[{e}]" for e in phase))]:
            del results[name]
        if i == 0:
            del results["bare cached greedy loop"], results["model.generate"]
        for _ in range(args.repeats):
            once(phase, comparators=i == 0)

    def median(name: str) -> tuple[float, float]:
        """Median total s and median decode s per token after the first (each run its own)."""
        total = statistics.median(t for _, t, _ in results[name])
        per_token = statistics.median((t - p) / max(k - 1, 1) for p, t, k in results[name])
        return total, per_token

    floor = weight_bytes / copy_bandwidth(device, sync)
    bare_dec = median("bare cached greedy loop")[1]
    gen_dec = median("model.generate")[1]
    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"cpu x{args.threads}"
    where += f", {args.clock} clock"
    print(
        f"\n== {preset}: {weight_bytes / 2**30:.2f} GiB of {args.dtype} weights, V={vocab}, "
        f"{where}, m={m} (+1 public row), {n} tokens, prompt tokens "
        f"{min(map(len, rows))}-{max(map(len, rows))}, median of {args.repeats}"
    )
    head = f"{'total s':>9}{'decode ms/token':>17}{'x bare loop':>13}{'x engine':>10}"
    print(f"{'':36}{head}{'x generate':>12}{'private':>9}")
    print(f"{'weight-read floor':36}{'':>9}{1e3 * floor:17.2f}{floor / bare_dec:13.2f}")
    for name in ["bare cached greedy loop", "model.generate"]:
        total, dec = median(name)
        ratios = f"{dec / bare_dec:13.2f}{'':10}{dec / gen_dec:12.2f}"
        print(f"{name:36}{total:9.3f}{1e3 * dec:17.2f}{ratios}")
    gen_total, _ = median("model.generate")
    for engine in engines:
        loop_dec = median(f"[{engine}] greedy loop")[1]
        for short in ["greedy loop", *mechs[engine]]:
            name = f"[{engine}] {short}"
            total, dec = median(name)
            spent = f"{private[name]:9d}" if name in private else ""
            if name in generated and generated[name] != n:
                spent += f" ({generated[name]} tokens)"
            ratios = f"{dec / bare_dec:13.2f}{dec / loop_dec:10.2f}{dec / gen_dec:12.2f}"
            print(f"{name:36}{total:9.3f}{1e3 * dec:17.2f}{ratios}{spent}")
        print(
            f"[{engine}] first greedy loop (allocation, capture, compilation): {warm[engine]:.1f} s"
        )
        text_total, _ = median(f"[{engine}] HFTextModel.generate")
        print(
            f"[{engine}] HFTextModel.generate ({len(prompts)} rows) {text_total:.3f} s vs "
            f"model.generate {gen_total:.3f} s: {text_total / gen_total:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), nargs="+", default=["small"])
    parser.add_argument(
        "--model",
        choices=["random", "smollm2"],
        default="random",
        help="random: Llama-shaped random models (--preset); smollm2: SmolLM2-135M-Instruct "
        "(dprag_core.eval.smollm2, its own end ids: a mechanism may stop early)",
    )
    parser.add_argument("--unit", choices=["token", "word"], nargs="+", default=["token", "word"])
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="cpu: the process's CPU time (fair ratios when other jobs share the CPU)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--vocab", type=int, default=None, help="override the preset's V")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--m", type=int, nargs="+", default=[40])
    parser.add_argument("--doc-chars", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--prompt-width", type=int, default=None, help="the engines' public prompt width"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--engine",
        choices=list(ENGINES),
        nargs="+",
        default=["eager"],
    )
    args = parser.parse_args()
    if args.tokens < 2 or args.repeats < 1 or min(args.m) < 1:
        parser.error("--tokens must be >= 2, --repeats and --m >= 1")
    if args.clock == "cpu" and args.device != "cpu":
        parser.error("--clock cpu times CPU work only: use it with --device cpu")
    _clock[0] = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    for preset in ["smollm2"] if args.model == "smollm2" else args.preset:
        for m in args.m:
            run(args, preset, m, tok)


if __name__ == "__main__":
    main()
