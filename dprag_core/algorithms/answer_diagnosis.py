"""Why a DPAnswerVote answer is empty: the voters' agreement against the bar h⊥ (NOT PRIVATE).

**For the data owner only.** :func:`diagnose` runs DPAnswerVote's voters on the
real records and reports what the DP answer hides: how many voters answered, how
many agree on the top answer key, the runner-up, and the bar h⊥ that the top
count must clear (plus Gumbel noise of scale 2/ε) to be released at the chosen
ε. It is a non-private view of the corpus: it spends no budget and must never be
shown to whoever asks the questions (``dprag diagnose`` labels its output so).

Reading it: DPAnswerVote releases the top key when its count, plus noise,
beats h⊥ = 2 + (2/ε)·ln(2/δ) plus noise (:meth:`DPAnswerVote.bar`). A top count
well under the bar means the question has too few supporting records for that ε
(more voters with the fact, a larger ε, or a smaller k per voter); many
abstentions mean the model did not answer from its records (look at its
non-private answers first); a split between two keys means the answers do not
share a key (their wording, see :func:`~dprag_core.algorithms.answer_keys.answer_key`).

>>> from dprag_core.retrieval.documents import ScoredDocument
>>> class Reader:  # answers with the record it is given
...     def generate(self, prompts, *, max_new_tokens=64):
...         return [p.split("Context:\\n")[1].split("\\n")[0] for p in prompts]
>>> docs = [ScoredDocument(f"d{i}", "Metformin." if i < 12 else "I don't know.", 0.9,
...                        unit=f"u{i}") for i in range(20)]
>>> mech = DPAnswerVote(Reader(), m=20, k=1, epsilon=5.0, delta=1e-4)
>>> d = diagnose(mech, "Which drug treats Snurfosis?", docs, rng=0)
>>> d.top_key, d.top_votes, d.abstained, round(d.bar, 2), d.clears_bar
('metformin', 12, 8, 5.96, True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dprag_core.algorithms.answer_vote import DPAnswerVote
from dprag_core.mechanisms.rng import RngLike
from dprag_core.retrieval.documents import ScoredDocument

__all__ = ["NOT_PRIVATE", "Diagnosis", "diagnose"]

NOT_PRIVATE = (
    "NOT PRIVATE - data owner only: these counts are read from the private records without "
    "any noise and spend no budget; never show them to whoever asks the questions."
)
"""The label every rendering of a :class:`Diagnosis` starts with."""


@dataclass(frozen=True)
class Diagnosis:
    """One question's voters, as :func:`diagnose` saw them (NOT private)."""

    question: str
    voters: int
    abstained: int
    top_key: str | None
    top_votes: int
    runner_up_votes: int
    bar: float
    epsilon: float

    @property
    def clears_bar(self) -> bool:
        """Whether the top count is above h⊥ before noise (released more often than not)."""
        return self.top_votes > self.bar

    def line(self) -> str:
        """One line: the agreement, the bar and the verdict."""
        top = "-" if self.top_key is None else repr(self.top_key)
        verdict = "clears the bar" if self.clears_bar else "below the bar: likely empty"
        return (
            f"{self.question}\n    {self.top_votes}/{self.voters} voters agree on {top} "
            f"(runner-up {self.runner_up_votes}, abstained {self.abstained}); "
            f"bar h⊥ = {self.bar:.1f} at epsilon {self.epsilon:g}: {verdict}"
        )


def diagnose(
    mechanism: DPAnswerVote, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
) -> Diagnosis:
    """The voters' keys of ``mechanism`` on ``docs`` for ``question``, counted (NOT private).

    ``docs``: the candidates the app's retriever gives (``mechanism.candidates_needed()``
    of them, best first); ``rng`` seeds the voters' random partition.
    """
    keys = mechanism.keys(question, docs, rng=rng)
    counts: list[tuple[str | None, int]] = [*Counter(keys).most_common(2), (None, 0), (None, 0)]
    (top, top_votes), (_, runner_up) = counts[0], counts[1]
    return Diagnosis(
        question=question,
        voters=mechanism.m,
        abstained=mechanism.m - len(keys),
        top_key=top,
        top_votes=top_votes,
        runner_up_votes=runner_up,
        bar=mechanism.bar(),
        epsilon=mechanism.epsilon,
    )
