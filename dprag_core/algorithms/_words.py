"""Voting units: one vote (and one decision) per token, or per word.

Token-level voting (Koga et al.) spends one private decision per token; an entity
the model splits into five BPE pieces ("Kir", "zy", "af", "il", ...) costs five,
although the voters agree on it as a whole. With ``unit="word"`` every voter
proposes its next *word* and the mechanism decides once per word.

**Word rule** (public: a function of token ids and the tokenizer only). A row's
word is read from its own greedy continuation (:meth:`~dprag_core.models.base.
LookaheadSession.lookahead`): its first token, then every following token up to,
not including, the first one that starts a new word — a token whose text, after
another token, begins with whitespace — or an end token; at most ``max_tokens``
tokens. A continuation that starts with an end token proposes the end alone.

**Ballot.** The voters' words (and the public prompt's word, when the mechanism
uses it) are sorted (tuple order of token ids: a fixed, data-independent total
order) and numbered; the vote histogram counts each voter's word once. Privacy:
a voter's word depends only on its own documents and the public prefix, so one
added or removed privacy unit still changes one voter's vote (one count −1 and
another +1) — the relation every token rule is calibrated for. The word domain
W (every token tuple of at most ``max_tokens`` tokens) is too large to list, so
only LimitedDomain applies (it reads the top k̄ counts and one threshold, never
the whole domain); the exponential mechanism would need W and is refused.

Proof sketch of the claim (LimitedDomain with k̄ = m, so k̄ ≥ the number of
voted words). Add to W m dummy items z_1..z_m that never get a vote and come
first in the tie-break order, and map each z_i to ⊥ afterwards: a map that
reads only the output, so LimitedDomain's claim over W ∪ {z_i} carries over
(the dummies' counts never change, so the relation is unchanged). Its top k̄
holds every voted word and k̄ − (voted words) zero-count items, and h[k̄+1] = 0.
The ballot reproduces exactly that: the proposed words (the public word among
them, with count 0 when no voter proposed it) then ``m`` zero-count slots; the
sampler's top k̄ holds every voted word and zero-count entries only, and
:meth:`WordBallot.chosen` releases any zero-count entry *of the selection* as ⊥.
A Gumbel-max's output law depends only on the multiset of (count, released
output) pairs of its candidates, which is the same in both, so the two
mechanisms have the same output distribution. (Releasing a zero-count entry as
that word instead would not be the same mechanism: which words have count 0
depends on the data.) DPSparseVote's free path is not a selection: when the
sparse vector lets the public word through it is released as that word, voted
for or not (the decision reads the public word's count only through the sparse
vector, which is calibrated for it).

>>> class Chars:  # one token per character, EOS = 0
...     eos_token_ids, vocab_size = frozenset({0}), 128
...     def encode(self, text): return [ord(c) for c in text]
...     def decode(self, ids): return "".join(chr(i) for i in ids if i)
>>> split = WordSplitter(Chars(), max_tokens=8)
>>> split.word([ord(c) for c in "Kir is"]), split.word([0, 65])
((75, 105, 114), (0,))
>>> ballot = word_ballot([(75,), (75,)], public=(66,), m=3)
>>> ballot.words, ballot.counts.counts.tolist(), ballot.public
([(66,), (75,)], [2], 0)
>>> ballot.chosen(0, private=True), ballot.chosen(0, private=False)
(None, (66,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from dprag_core.mechanisms.histogram import SparseCounts
from dprag_core.models.base import TokenModel
from dprag_core.models.codec import word_starts
from dprag_core.validation import positive_int

__all__ = ["UNITS", "WordBallot", "WordSplitter", "word_ballot"]

#: The voting units: ``"token"`` (Koga et al.) or ``"word"`` (this module).
UNITS = ("token", "word")

Word = tuple[int, ...]

Vote = TypeVar("Vote", tuple[int, ...], str)
"""What a ballot counts: a word (its token ids), or an answer's key (answer-level voting)."""


class WordSplitter:
    """The public word rule of a model (module docstring): one bool per vocabulary entry."""

    def __init__(self, model: TokenModel, *, max_tokens: int) -> None:
        self.max_tokens = positive_int("max_word_tokens", max_tokens)
        self._eos = model.eos_token_ids
        self._starts = word_starts(model)  # public, computed once per model

    def starts_word(self, token: int) -> bool:
        """Whether ``token`` ends the word before it (whitespace-led text, or an end token)."""
        return bool(self._starts[token])

    def word(self, row: Sequence[int]) -> Word:
        """The word a continuation proposes (its first ``max_tokens`` tokens at most)."""
        tokens = [int(t) for t in row[: self.max_tokens]]
        if tokens[0] in self._eos:
            return (tokens[0],)
        end = next((i for i in range(1, len(tokens)) if self.starts_word(tokens[i])), len(tokens))
        return tuple(tokens[:end])

    def complete(self, rows: npt.NDArray[np.intp]) -> bool:
        """Whether every row's word is known from ``rows`` [B, j] (a lookahead's stop rule).

        Called after every lookahead step: one table lookup over the [B, j] block.
        """
        tokens = np.asarray(rows)
        ended = np.isin(tokens[:, 0], list(self._eos)) | self._starts[tokens[:, 1:]].any(axis=1)
        return bool(ended.all())


@dataclass(frozen=True)
class WordBallot(Generic[Vote]):
    """The voters' words numbered in sorted order, their histogram, the public word's number.

    The same ballot counts the answer keys of answer-level voting
    (:class:`~dprag_core.algorithms.answer_vote.DPAnswerVote`: strings, no public
    entry), with the same proof (module docstring). Private (it holds the voters'
    words): pass ``counts`` only to a DP selection.
    """

    words: list[Vote]
    counts: SparseCounts
    public: int | None

    def chosen(self, index: int, *, private: bool) -> Vote | None:
        """The word a decision releases; None for ⊥.

        ``private``: the entry came from the private selection, where a zero-count
        entry stands for a never-voted dummy and is released as ⊥ (module
        docstring). A free decision (DPSparseVote's public word when the sparse
        vector lets it through, whatever its count — 0 included — or a non-private
        vote) releases its word as it is: mapping a free public word to ⊥ when no
        voter proposed it would make the free path's output depend on the votes.
        """
        if index < 0 or index >= len(self.words):
            return None
        if private and self.counts.count(index) == 0:
            return None
        return self.words[index]

    def __repr__(self) -> str:  # the words are the voters' private proposals
        return f"WordBallot(<{len(self.words)} words hidden>)"


def word_ballot(voter_words: Sequence[Vote], *, public: Vote | None, m: int) -> WordBallot[Vote]:
    """Number the proposed words (module docstring) and count the voters' votes."""
    words = sorted(set(voter_words) | ({public} if public is not None else set()))
    number = {w: i for i, w in enumerate(words)}
    counts = SparseCounts.from_votes(
        [number[w] for w in voter_words], size=len(words) + positive_int("m", m)
    )
    return WordBallot(words, counts, None if public is None else number[public])
