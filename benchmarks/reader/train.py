"""Train the project's small reader LM (shipped in dprag_core/assets/reader).

The reader is a ~1M-parameter Llama-style causal LM with a byte-level BPE
tokenizer, trained from scratch on reading-comprehension prompts built from a
*disjoint* synthetic world (``world=1``: other names, diseases, treatments than
the evaluation world 0), in exactly the prompt formats of ``dprag_core.prompts``:

- ``RAG_TEMPLATE`` + `` <answer><eos>``: contexts of 1-4 records (the relevant
  record(s) plus distractors), so it learns to copy the answer from the context;
  some contexts hold no relevant record (the answer is then an uninformed guess);
- ``NO_CONTEXT_TEMPLATE``: a plausible but uninformed guess (a fresh invented word
  of the right kind), so that non-RAG accuracy on the test world stays at chance;
- ``KEYWORDS_TEMPLATE``: the answer among a few keywords (DP-KSA's final step).

Every token carries the loss (a dense copy signal); 20% of the examples are a
pure copy task ("Repeat the context."). Reproducible from ``--seed``
(on CPU with a fixed thread count). Usage::

    nice -n 10 .venv/bin/python benchmarks/reader/train.py            # ~15 min on 2 cores
    .venv/bin/python benchmarks/reader/train.py --steps 50 --out /tmp/r  # smoke run

At the end it prints greedy match accuracy on the test world (world 0):
non-RAG (no context) vs RAG with the right record among distractors.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from dprag_core.eval.synthetic import (
    QUESTION_KINDS,
    WordFactory,
    question_for,
    render_record,
)
from dprag_core.prompts import KEYWORDS_TEMPLATE, NO_CONTEXT_TEMPLATE, RAG_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "dprag_core" / "assets" / "reader"
EOS = "<|endoftext|>"
PAD = "<|pad|>"


@dataclass
class Patient:
    name: str
    phone: str
    symptoms: tuple[str, ...]
    disease: str
    treatment: str

    def text(self, template: int) -> str:
        return render_record(
            self.name, self.phone, self.symptoms, self.disease, self.treatment, template
        )


@dataclass
class Example:
    prompt: str
    answer: str
    kind: str


class ExampleMaker:
    """Draws training (or evaluation) examples from one synthetic world."""

    def __init__(self, *, world: int, seed: int, repeat_share: float = 0.2) -> None:
        self.words = WordFactory(world=world, seed=seed)
        self.rng = random.Random(seed * 1000 + world)
        self.repeat_share = repeat_share

    def patient(
        self,
        disease: str | None = None,
        treatment: str | None = None,
        symptoms: tuple[str, ...] | None = None,
    ) -> Patient:
        return Patient(
            self.words.name(),
            self.words.phone(),
            symptoms if symptoms is not None else self.words.symptom_set(3),
            disease or self.words.disease(),
            treatment or self.words.treatment(),
        )

    def guess(self, kind: str) -> str:
        if kind == "treatment":
            return self.words.treatment()
        if kind == "disease":
            return self.words.disease()
        return self.words.phone()

    def _question(self, kind: str, target: Patient) -> tuple[str, str]:
        if kind == "treatment":
            return question_for("treatment", disease=target.disease), target.treatment
        if kind == "disease":
            sym = list(target.symptoms)
            self.rng.shuffle(sym)
            return question_for("disease", symptoms=sym), target.disease
        return question_for("phone", name=target.name), target.phone

    def context(self, kind: str, target: Patient, n_ctx: int, relevant: int) -> str:
        docs: list[Patient] = []
        for i in range(relevant):
            if i == 0:
                docs.append(target)
            else:  # other patients with the same disease support the same fact
                sym = list(target.symptoms)
                self.rng.shuffle(sym)
                docs.append(self.patient(target.disease, target.treatment, tuple(sym)))
        while len(docs) < n_ctx:
            docs.append(self.patient())
        self.rng.shuffle(docs)
        return "\n".join(d.text(self.rng.randrange(3)) for d in docs)

    def rag(
        self, *, kind: str | None = None, n_ctx: int | None = None, irrelevant: bool = False
    ) -> Example:
        kind = kind or self.rng.choice(QUESTION_KINDS)
        n_ctx = n_ctx or self.rng.choice((1, 2, 2, 3, 3, 4))
        target = self.patient()
        question, answer = self._question(kind, target)
        if irrelevant:
            relevant, answer = 0, self.guess(kind)
        elif kind == "phone":
            relevant = 1
        else:
            relevant = self.rng.randint(1, max(1, n_ctx - 1))
        ctx = self.context(kind, target, n_ctx, relevant)
        return Example(RAG_TEMPLATE.format(context=ctx, question=question), answer, kind)

    def no_context(self, *, kind: str | None = None) -> Example:
        kind = kind or self.rng.choice(QUESTION_KINDS)
        question, _ = self._question(kind, self.patient())
        return Example(NO_CONTEXT_TEMPLATE.format(question=question), self.guess(kind), kind)

    def keywords(self) -> Example:
        """DP-KSA's final step: released keywords are lower-case, alphabetical, comma-joined.

        Keywords come from the voters' answers (``extract_keywords``): the answer word
        and maybe a few stray guesses (treatment and disease questions only: a phone
        number arrives as digit groups in alphabetical order, which cannot be undone).
        """
        kind = self.rng.choice(QUESTION_KINDS[:2])
        question, answer = self._question(kind, self.patient())
        answer = answer.lower()
        n_other = self.rng.choice((0, 0, 1, 1, 2, 3))
        words = [answer] + [
            self.guess(self.rng.choice(QUESTION_KINDS[:2])).lower() for _ in range(n_other)
        ]
        kw = ", ".join(sorted(set(words)))
        return Example(KEYWORDS_TEMPLATE.format(keywords=kw, question=question), answer, kind)

    def repeat(self) -> Example:
        """A pure copy task (dense copy signal: every answer token is in the context)."""
        ctx = self.context("phone", self.patient(), self.rng.choice((1, 1, 2)), 1)
        return Example(
            RAG_TEMPLATE.format(context=ctx, question="Repeat the context."), ctx, "repeat"
        )

    def mixed(self) -> Example:
        u = self.rng.random() / (1 - self.repeat_share)
        if u < 0.6875:
            return self.rag()
        if u < 0.75:
            return self.rag(irrelevant=True)
        if u < 0.875:
            return self.no_context()
        if u < 1.0:
            return self.keywords()
        return self.repeat()


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=EOS, unk_token=None
    )


def encode_examples(
    tokenizer: PreTrainedTokenizerFast, examples: list[Example]
) -> list[tuple[list[int], int]]:
    """(ids, loss start) per example: prompt ids + ' answer' ids + EOS; loss on every token.

    A full-sequence loss gives a dense copy signal (names repeated across records,
    in the question, in the answer, the repeat task) that grows induction heads early.
    """
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    answers = tokenizer([" " + e.answer for e in examples], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [(p + a + [eos], 1) for p, a in zip(prompts, answers, strict=True)]


def make_batch(
    items: list[tuple[list[int], int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, (ids, plen) in enumerate(items):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, plen : len(ids)] = torch.tensor(ids[plen:])
        mask[row, : len(ids)] = 1
    return input_ids, labels, mask


def copy_loss(model: LlamaForCausalLM, *, batch: int, vocab: int) -> torch.Tensor:
    """Loss of copying a random token segment seen earlier (loss on the copy only).

    Each row is ``noise, x, noise, x`` with random lengths, so the only way to predict
    the second ``x`` is an induction head (attend to the token after the previous
    occurrence of the current token), not a fixed look-back offset. On the reading
    task alone the model settles on unigram/bigram guesses and never starts copying
    within a CPU budget; this task grows the heads, and kept as an auxiliary loss
    during the main phase it keeps them.
    """
    rows, masks = [], []
    for _ in range(batch):
        n1, seg, n2 = (
            int(v)
            for v in torch.randint(0, 16, (1,)).tolist()
            + torch.randint(6, 30, (1,)).tolist()
            + torch.randint(0, 16, (1,)).tolist()
        )
        x = torch.randint(2, vocab, (seg,))
        row = torch.cat([torch.randint(2, vocab, (n1,)), x, torch.randint(2, vocab, (n2,)), x])
        lab = row.clone()
        lab[: n1 + seg + n2 + 1] = -100
        rows.append(row)
        masks.append(lab)
    width = max(len(r) for r in rows)
    seq = torch.full((batch, width), 1, dtype=torch.long)
    labels = torch.full((batch, width), -100, dtype=torch.long)
    for b, (row, lab) in enumerate(zip(rows, masks, strict=True)):
        seq[b, : len(row)] = row
        labels[b, : len(lab)] = lab
    loss: torch.Tensor = model(input_ids=seq, labels=labels).loss
    return loss


def copy_warmup(
    model: LlamaForCausalLM, opt: torch.optim.Optimizer, *, steps: int, lr: float, vocab: int
) -> None:
    """Phase 1: the copy task alone."""
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20)
        loss = copy_loss(model, batch=32, vocab=vocab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 50 == 0:
            print(f"copy warm-up {step + 1}/{steps} loss {float(loss.detach()):.3f}", flush=True)


@torch.no_grad()
def greedy_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    examples: list[Example],
    max_new_tokens: int = 16,
) -> float:
    """Exact-match accuracy of greedy answers (left-padded batches)."""
    model.eval()
    tokenizer.padding_side = "left"
    hits = 0
    for start in range(0, len(examples), 32):
        chunk = examples[start : start + 32]
        enc = tokenizer(
            [e.prompt for e in chunk], return_tensors="pt", padding=True, add_special_tokens=False
        )
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        texts = tokenizer.batch_decode(
            out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        hits += sum(t.strip() == e.answer for t, e in zip(texts, chunk, strict=True))
    model.train()
    return hits / len(examples)


def evaluate(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, *, n: int, seed: int
) -> dict[str, float]:
    """Test-world (world 0) accuracy: non-RAG, RAG with 1 and 4 records, per kind."""
    maker = ExampleMaker(world=0, seed=seed)
    result: dict[str, float] = {}
    for kind in QUESTION_KINDS:
        result[f"nonrag_{kind}"] = greedy_accuracy(
            model, tokenizer, [maker.no_context(kind=kind) for _ in range(n)]
        )
        for n_ctx in (1, 4):
            result[f"rag{n_ctx}_{kind}"] = greedy_accuracy(
                model, tokenizer, [maker.rag(kind=kind, n_ctx=n_ctx) for _ in range(n)]
            )
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--copy-warmup", type=int, default=400, help="steps of pure copy first")
    ap.add_argument("--repeat-share", type=float, default=0.2, help="share of copy examples")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-n", type=int, default=100)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    t0 = time.perf_counter()

    maker = ExampleMaker(world=1, seed=args.seed, repeat_share=args.repeat_share)
    n_examples = args.steps * args.batch
    examples = [maker.mixed() for _ in range(n_examples)]
    tokenizer = train_tokenizer([e.prompt + " " + e.answer for e in examples[:20000]], args.vocab)
    data = encode_examples(tokenizer, examples)
    t_data = time.perf_counter() - t0
    lengths = [len(ids) for ids, _ in data]
    print(
        f"{n_examples} examples in {t_data:.0f}s; tokens/example mean {np.mean(lengths):.0f}, "
        f"max {max(lengths)}",
        flush=True,
    )

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()
    t_train = time.perf_counter()
    copy_warmup(model, opt, steps=args.copy_warmup, lr=args.lr, vocab=len(tokenizer))
    order = np.random.default_rng(args.seed).permutation(n_examples)
    running = 0.0
    for step in range(args.steps):
        idx = order[step * args.batch : (step + 1) * args.batch]
        input_ids, labels, mask = make_batch([data[int(i)] for i in idx], tokenizer.pad_token_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        aux = copy_loss(model, batch=8, vocab=len(tokenizer))
        opt.zero_grad(set_to_none=True)
        (loss + aux).backward()
        loss = loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        running = 0.98 * running + 0.02 * value if step else value
        if (step + 1) % 50 == 0 or step == 0:
            elapsed = time.perf_counter() - t_train
            print(f"step {step + 1}/{args.steps} loss {running:.3f} ({elapsed:.0f}s)", flush=True)
    train_s = time.perf_counter() - t_train

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(args.out)
    model = AutoModelForCausalLM.from_pretrained(args.out)
    tokenizer = AutoTokenizer.from_pretrained(args.out)
    scores = evaluate(model, tokenizer, n=args.eval_n, seed=args.seed + 1)
    info = {
        "seed": args.seed,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "repeat_share": args.repeat_share,
        "copy_warmup": args.copy_warmup,
        "vocab": len(tokenizer),
        "hidden": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "threads": args.threads,
        "parameters": n_params,
        "train_seconds": round(train_s, 1),
        "data_seconds": round(t_data, 1),
        "test_world_accuracy": scores,
    }
    (args.out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
