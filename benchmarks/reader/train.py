"""Train the project's small reader LM (shipped in dprag_core/assets/reader).

The reader is a ~0.6M-parameter Llama-style causal LM (2 layers, 8 heads, hidden 128)
with a byte-level BPE tokenizer (single-digit tokens; syllable-level merges learnt from
invented words of the training worlds 1-3), trained from scratch on reading-comprehension
prompts built from a *disjoint* synthetic world (``world=1``: other names, diseases,
treatments than the evaluation world 0), in exactly the prompt formats of
``dprag_core.prompts``:

- ``RAG_TEMPLATE`` + `` <answer><eos>``: contexts of 1-2 records first, then 1-4
  (the relevant record(s) plus distractors), so it learns to copy the answer from the
  context; some contexts hold no relevant record (the answer is then an uninformed guess);
- ``NO_CONTEXT_TEMPLATE``: a plausible but uninformed guess (a fresh invented word
  of the right kind), so that non-RAG accuracy on the test world stays at chance;
- ``KEYWORDS_TEMPLATE``: the answer among a few keywords (DP-KSA's final step).

Recipe: (1) a pure copy task first (``noise, x, noise, x`` over the invented-word token
inventory, random lengths and offsets, loss on the second ``x``) until induction (copy)
heads form -- its loss falls from ~6 to ~0.1 after ~800 steps; on the reading task alone
they never formed within a CPU budget; (2) the reading task (answer tokens weigh 1, the
other tokens 0.2) with a small copy batch kept as an auxiliary loss. Further stages
continue a saved reader (``--init-from``): (3) an auxiliary *phone* copy task
(``--phone-aux``) -- digit strings repeat tokens, so copying them needs more than
one-token induction; with this task from the start the reading skill formed later and
worse, but on top of a reader that already copies, phones copy within a few hundred
steps; (4) a heavier loss on the EOS (``--eos-weight``), which cured answers that ran
on past the word (``Snubemiaemia``); (5) more multi-record contexts
(``--context-sizes``). Every ``--check-every`` steps it prints greedy accuracy on a few
test-world RAG examples. Reproducible from ``--seed`` (on CPU with a fixed thread
count). Reader v2 (each stage's record is nested in its
``training_info.json`` under ``init_from``) is::

    T=benchmarks/reader/train.py; S="--copy-steps 0 --ramp 0 --threads 2"
    .venv/bin/python $T --threads 1 --out /tmp/r1                       # 34 min, 1 core
    .venv/bin/python $T $S --init-from /tmp/r1 --out /tmp/r2 --seed 1 \\
        --steps 1500 --phone-aux 8 --lr 1e-3                             # 13 min
    .venv/bin/python $T $S --init-from /tmp/r2 --out /tmp/r3 --seed 2 \\
        --steps 1500 --phone-aux 8 --lr 5e-4 --eos-weight 3              # 14 min
    .venv/bin/python $T $S --init-from /tmp/r3 --seed 3 \\
        --steps 2000 --phone-aux 8 --lr 5e-4 --eos-weight 3 --context-sizes 1 2 3 3 4 4

(the last stage 19 min on 2 cores; stage 1 with ``--threads 2`` runs faster but changes
the floating-point reduction order and so the exact weights). A smoke run is
``--steps 50 --copy-steps 50 --out /tmp/r``.

The shipped reader v3 answers in a sentence, the answer first
(:func:`dprag_core.eval.synthetic.answer_sentence`: "Kirzyafil is the treatment
recommended for Reegraitis."), so that without the corpus the rest of the sentence
is predictable and DPSparseVote releases it for free. It continues v2 (the reader
the commands above write, shipped before as ``dprag_core/assets/reader``) for 450
steps on one core (``--answer-style sentence``; the command is also recorded in
its ``training_info.json``)::

    .venv/bin/python $T --copy-steps 0 --ramp 0 --threads 1 --init-from /tmp/r4 \
        --out /tmp/r17_s1 --seed 4 --steps 450 --check-every 225 --phone-aux 8 \
        --lr 5e-4 --eos-weight 3 --context-sizes 1 2 3 3 4 4 --answer-style sentence

(``/tmp/r4``: the v2 reader, i.e. the fourth command above with ``--out /tmp/r4``;
28 min on one core of a busy 2-core machine.)

At the end it prints greedy match accuracy on the test world (world 0):
non-RAG (no context) vs RAG with the right record among distractors.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
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
    QuestionKind,
    WordFactory,
    answer_sentence,
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

    def __init__(
        self, *, world: int, seed: int, repeat_share: float = 0.2, sentences: bool = False
    ) -> None:
        self.words = WordFactory(world=world, seed=seed)
        self.rng = random.Random(seed * 1000 + world)
        self.repeat_share = repeat_share
        self.sentences = sentences

    def say(self, kind: QuestionKind, answer: str, target: Patient) -> str:
        """The target text: the bare answer, or with ``sentences`` the answer sentence."""
        if not self.sentences:
            return answer
        return answer_sentence(kind, answer, target.name if kind == "phone" else target.disease)

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

    def guess(self, kind: QuestionKind) -> str:
        if kind == "treatment":
            return self.words.treatment()
        if kind == "disease":
            return self.words.disease()
        return self.words.phone()

    def _question(self, kind: QuestionKind, target: Patient) -> tuple[str, str]:
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
        self,
        *,
        kind: QuestionKind | None = None,
        n_ctx: int | None = None,
        irrelevant: bool = False,
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
        prompt = RAG_TEMPLATE.format(context=ctx, question=question)
        return Example(prompt, self.say(kind, answer, target), kind)

    def no_context(self, *, kind: QuestionKind | None = None) -> Example:
        kind = kind or self.rng.choice(QUESTION_KINDS)
        target = self.patient()
        question, _ = self._question(kind, target)
        answer = self.say(kind, self.guess(kind), target)
        return Example(NO_CONTEXT_TEMPLATE.format(question=question), answer, kind)

    def keywords(self) -> Example:
        """DP-KSA's final step: released keywords are lower-case, alphabetical, comma-joined.

        Keywords come from the voters' answers (``extract_keywords``): the answer word
        and maybe a few stray guesses (treatment and disease questions only: a phone
        number arrives as digit groups in alphabetical order, which cannot be undone).
        """
        kind = self.rng.choice(QUESTION_KINDS[:2])
        target = self.patient()
        question, answer = self._question(kind, target)
        answer = answer.lower()
        n_other = self.rng.choice((0, 0, 1, 1, 2, 3))
        words = [answer] + [
            self.guess(self.rng.choice(QUESTION_KINDS[:2])).lower() for _ in range(n_other)
        ]
        kw = ", ".join(sorted(set(words)))
        return Example(
            KEYWORDS_TEMPLATE.format(keywords=kw, question=question),
            self.say(kind, answer, target),
            kind,
        )

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
    """Byte-level BPE with single-digit tokens (phone numbers copy digit by digit)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
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


def tokenizer_texts(seed: int, n_examples: int, n_words: int) -> list[str]:
    """Training-world prompts plus many invented words of the *other* training worlds.

    Worlds share onsets, vowels and codas, so BPE learns syllable-level merges and
    test-world words split into known syllables (world 0 is never seen).
    """
    maker = ExampleMaker(world=1, seed=seed + 7)
    texts = [e.prompt + " " + e.answer for e in (maker.mixed() for _ in range(n_examples))]
    for world in (1, 2, 3):
        words = WordFactory(world=world, seed=seed + 11)
        for _ in range(n_words // 3):
            texts.append(f"{words.name()} {words.disease()} {words.treatment()}")
    return texts


def encode(
    tokenizer: PreTrainedTokenizerFast, examples: list[Example]
) -> list[tuple[list[int], int]]:
    """(ids, answer start) per example: prompt ids + ' answer' ids + EOS."""
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    answers = tokenizer([" " + e.answer for e in examples], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [(p + a + [eos], len(p)) for p, a in zip(prompts, answers, strict=True)]


def make_batch(
    items: list[tuple[list[int], int]],
    pad_id: int,
    context_weight: float,
    last_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and per-target loss weights.

    Answer tokens weigh 1, the last one (EOS, where the answer stops) ``last_weight``,
    the other tokens ``context_weight``.
    """
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    weights = torch.zeros((len(items), width - 1))
    for row, (ids, start) in enumerate(items):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
        weights[row, : start - 1] = context_weight
        weights[row, start - 1 : len(ids) - 1] = 1.0
        weights[row, len(ids) - 2] = last_weight
    return input_ids, mask, weights


def weighted_loss(
    model: LlamaForCausalLM, input_ids: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(weights)
    return (nll * weights).sum() / weights.sum()


def copy_batch(
    gen: torch.Generator, pool: torch.Tensor, *, batch: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows ``noise, x, noise, x`` of tokens drawn from the invented-word inventory.

    Random lengths and offsets: the second ``x`` is only predictable by an induction
    (copy) head; loss on the second ``x`` only.
    """
    n1, seg, n2 = (
        torch.randint(0, 24, (batch,), generator=gen),
        torch.randint(4, 24, (batch,), generator=gen),
        torch.randint(0, 24, (batch,), generator=gen),
    )
    width = int((n1 + 2 * seg + n2).max())
    ids = pool[torch.randint(0, len(pool), (batch, width), generator=gen)]
    mask = torch.zeros((batch, width), dtype=torch.long)
    weights = torch.zeros((batch, width - 1))
    for b in range(batch):
        a, s, c = int(n1[b]), int(seg[b]), int(n2[b])
        ids[b, a + s + c : a + 2 * s + c] = ids[b, a : a + s]
        mask[b, : a + 2 * s + c] = 1
        weights[b, a + s + c : a + 2 * s + c - 1] = 1.0
    return ids, mask, weights


def phone_copy_batch(
    gen: torch.Generator,
    tokenizer: PreTrainedTokenizerFast,
    pool: torch.Tensor,
    *,
    batch: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows ``noise, phone, noise, phone`` (loss on the second phone number).

    Digit strings repeat tokens, so copying them needs more than the one-token
    induction the word copy task teaches; this dense signal teaches it in a few
    hundred steps once induction heads exist (the reading task alone did not).
    """
    rows: list[tuple[list[int], int]] = []
    for _ in range(batch):
        d = [int(x) for x in torch.randint(0, 10, (10,), generator=gen)]
        phone = f" {d[0]}{d[1]}{d[2]}-{d[3]}{d[4]}{d[5]}-{d[6]}{d[7]}{d[8]}{d[9]}"
        ids = tokenizer(phone, add_special_tokens=False)["input_ids"]
        n1, n2 = (int(n) for n in torch.randint(0, 24, (2,), generator=gen))
        noise = pool[torch.randint(0, len(pool), (n1 + n2,), generator=gen)].tolist()
        seq = noise[:n1] + ids + noise[n1:] + ids
        rows.append((seq, len(seq) - len(ids) + 1))  # from the token after the space
    return make_batch(rows, int(tokenizer.pad_token_id), 0.0)


class Curriculum:
    """Training examples with contexts of 1-2 records first, then up to ``max_ctx``."""

    def __init__(
        self, maker: ExampleMaker, *, ramp_step: int, sizes: tuple[int, ...] = (1, 2, 3, 4, 4)
    ) -> None:
        self.maker = maker
        self.ramp_step = ramp_step
        self.sizes = sizes

    def example(self, step: int) -> Example:
        m, rng = self.maker, self.maker.rng
        u = rng.random()
        if u < 0.72:
            sizes = (1, 1, 2) if step < self.ramp_step else self.sizes
            return m.rag(n_ctx=rng.choice(sizes))
        if u < 0.77:
            return m.rag(irrelevant=True, n_ctx=rng.choice((1, 2)))
        if u < 0.89:
            return m.no_context()
        return m.keywords()


@torch.no_grad()
def greedy_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    examples: list[Example],
    max_new_tokens: int = 32,
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
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    *,
    n: int,
    seed: int,
    sentences: bool,
) -> dict[str, float]:
    """Test-world (world 0) accuracy: non-RAG, RAG with 1 and 4 records, per kind."""
    maker = ExampleMaker(world=0, seed=seed, sentences=sentences)
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


def quick_rag_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    *,
    n: int,
    seed: int,
    sentences: bool,
) -> dict[str, float]:
    """Test-world RAG accuracy with 1 and 2 records (progress check during training)."""
    maker = ExampleMaker(world=0, seed=seed, sentences=sentences)
    return {
        f"rag{n_ctx}_{kind}": greedy_accuracy(
            model, tokenizer, [maker.rag(kind=kind, n_ctx=n_ctx) for _ in range(n)]
        )
        for n_ctx in (1, 2)
        for kind in QUESTION_KINDS
    }


def earlier_info(path: Path | None) -> dict[str, object] | None:
    """The training record of the reader a continuation stage starts from (None: from scratch)."""
    if path is None:
        return None
    record = path / "training_info.json"
    return dict(json.loads(record.read_text())) if record.is_file() else {"path": str(path)}


def new_config(args: argparse.Namespace, tokenizer: PreTrainedTokenizerFast) -> LlamaConfig:
    """A fresh Llama config of the requested size for ``tokenizer``."""
    return LlamaConfig(
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2500, help="max reading steps")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--copy-steps", type=int, default=1000, help="steps of pure copy first")
    ap.add_argument("--copy-aux", type=int, default=8, help="copy rows per reading step")
    ap.add_argument(
        "--context-sizes",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4, 4],
        help="records per context after the ramp (drawn uniformly from this list)",
    )
    ap.add_argument("--eos-weight", type=float, default=1.0, help="loss weight of the EOS")
    ap.add_argument(
        "--answer-style",
        choices=("entity", "sentence"),
        default="entity",
        help="answer with the bare entity, or in a sentence (answer_sentence)",
    )
    ap.add_argument("--phone-aux", type=int, default=0, help="phone copy rows per reading step")
    ap.add_argument("--context-weight", type=float, default=0.2, help="loss weight off-answer")
    ap.add_argument("--ramp", type=float, default=0.3, help="share of steps with 1-2 records")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check-every", type=int, default=250)
    ap.add_argument("--stop-at", type=float, default=0.9, help="stop when quick RAG acc >= this")
    ap.add_argument("--eval-n", type=int, default=100)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="continue from a saved reader (its tokenizer and weights): a later stage",
    )
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    if args.init_from:
        tokenizer = AutoTokenizer.from_pretrained(args.init_from)
        model = LlamaForCausalLM.from_pretrained(args.init_from)
    else:
        tokenizer = train_tokenizer(tokenizer_texts(args.seed, 4000, 12000), args.vocab)
        model = LlamaForCausalLM(new_config(args, tokenizer))
    words = WordFactory(world=2, seed=args.seed + 13)
    sample = " ".join(
        f"{words.name()} {words.disease()} {words.treatment()} {words.phone()}" for _ in range(500)
    )
    pool = torch.tensor(sorted(set(tokenizer(sample, add_special_tokens=False)["input_ids"])))
    print(
        f"tokenizer {len(tokenizer)} tokens, copy pool {len(pool)} "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    total = args.copy_steps + args.steps
    warmup = 100

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, total - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    sentences = args.answer_style == "sentence"
    maker = ExampleMaker(world=1, seed=args.seed, sentences=sentences)
    curriculum = Curriculum(
        maker, ramp_step=int(args.ramp * args.steps), sizes=tuple(args.context_sizes)
    )
    model.train()
    t_train = time.perf_counter()
    running = 0.0
    history: list[dict[str, object]] = []
    done = 0
    for step in range(total):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        reading = step >= args.copy_steps
        if reading:
            batch = encode(
                tokenizer, [curriculum.example(step - args.copy_steps) for _ in range(args.batch)]
            )
            loss = weighted_loss(
                model,
                *make_batch(batch, tokenizer.pad_token_id, args.context_weight, args.eos_weight),
            )
            if args.copy_aux:
                loss = loss + 0.5 * weighted_loss(
                    model, *copy_batch(gen, pool, batch=args.copy_aux)
                )
            if args.phone_aux:
                loss = loss + 0.5 * weighted_loss(
                    model, *phone_copy_batch(gen, tokenizer, pool, batch=args.phone_aux)
                )
        else:
            loss = weighted_loss(model, *copy_batch(gen, pool, batch=args.batch))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        running = 0.95 * running + 0.05 * value if step else value
        done = step + 1
        if done % 50 == 0:
            elapsed = time.perf_counter() - t_train
            phase = "read" if reading else "copy"
            print(f"{phase} step {done}/{total} loss {running:.3f} ({elapsed:.0f}s)", flush=True)
        if reading and (step + 1 - args.copy_steps) % args.check_every == 0:
            quick = quick_rag_accuracy(
                model, tokenizer, n=24, seed=args.seed + 101, sentences=sentences
            )
            history.append({"step": done, **quick})
            print(f"  quick test-world RAG accuracy: {quick}", flush=True)
            late = step - args.copy_steps >= curriculum.ramp_step
            if late and min(quick.values()) >= args.stop_at:
                break
    train_s = time.perf_counter() - t_train

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(args.out)
    model = AutoModelForCausalLM.from_pretrained(args.out)
    tokenizer = AutoTokenizer.from_pretrained(args.out)
    scores = evaluate(model, tokenizer, n=args.eval_n, seed=args.seed + 1, sentences=sentences)
    info = {
        "command": shlex.join(["python", "benchmarks/reader/train.py", *sys.argv[1:]]),
        "init_from": earlier_info(args.init_from),
        "seed": args.seed,
        "steps_run": done,
        "copy_steps": args.copy_steps,
        "max_steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "copy_aux": args.copy_aux,
        "phone_aux": args.phone_aux,
        "eos_weight": args.eos_weight,
        "answer_style": args.answer_style,
        "context_sizes": args.context_sizes,
        "context_weight": args.context_weight,
        "ramp": args.ramp,
        "vocab": len(tokenizer),
        "hidden": model.config.hidden_size,
        "layers": model.config.num_hidden_layers,
        "heads": model.config.num_attention_heads,
        "threads": args.threads,
        "parameters": n_params,
        "train_seconds": round(train_s, 1),
        "quick_checks": history,
        "test_world_accuracy": scores,
    }
    (args.out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
