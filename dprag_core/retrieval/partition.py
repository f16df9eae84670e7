"""Exchangeable partition of retrieved candidates into m voters (Koga et al. Alg. 2 step 4).

Assignment rule, exactly:

1. Keep the first ``m*k`` candidates in the order given (the retriever's top-n);
   when fewer were retrieved, append ``ScoredDocument.padding(i)`` placeholders
   until there are exactly ``m*k``.
2. Group the candidates by privacy unit (``ScoredDocument.unit``): all chunks of
   one unit form one group; each placeholder is its own group.
3. Draw a uniformly random permutation of the groups and deal them round-robin:
   the group at permuted position j goes to voter ``j mod m``.

Why this is exchangeable (and never "by rank"): the voter a group lands in
depends only on the random permutation, not on the group's rank or score, and
the joint law of the assignment is invariant under relabelling the groups. When
every unit owns one candidate there are exactly ``m*k`` groups, each voter gets
exactly ``k`` documents, and the rule is Koga's "permute, then cut into blocks"
(round-robin over a uniform permutation has the same law as consecutive blocks).
Two neighbouring retrieved lists differ by one substitution; coupling the two
permutations, the substituted document lands in the same slot, so exactly one
voter's documents differ: the vote histograms differ in one vote (sensitivity 1).
Partitioning by rank (``docs[i::m]``) instead lets one inserted document shift
every voter.

Multi-chunk units: a unit's chunks always go to one voter (voters may then hold
more or fewer than ``k`` documents). The one-voter bound above assumes a
neighbouring corpus changes one *candidate slot*; when one unit can own several
of the top ``m*k`` chunks, adding it can displace several other candidates, so
retrieve at most one chunk per unit (or count the unit's chunks in the
sensitivity) to keep the guarantee.

>>> docs = [ScoredDocument(id=str(i), text=f"doc {i}", score=1.0 - i / 10) for i in range(5)]
>>> groups = partition_voters(docs, m=3, k=2, rng=0)
>>> [len(g) for g in groups]
[2, 2, 2]
>>> sum(d.is_padding for g in groups for d in g)
1
"""

from __future__ import annotations

from collections.abc import Sequence

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.retrieval.documents import ScoredDocument
from dprag_core.validation import positive_int

__all__ = ["partition_voters"]


def partition_voters(
    docs: Sequence[ScoredDocument], *, m: int, k: int, rng: RngLike = None
) -> list[list[ScoredDocument]]:
    """Split the top ``m*k`` candidates into ``m`` voters, uniformly at random by unit.

    See the module docstring for the exact rule. Returns ``m`` lists (a voter may
    be empty only when multi-chunk units leave fewer groups than voters).

    >>> d = [ScoredDocument(id="a1", text="x", score=0.9, unit="a"),
    ...      ScoredDocument(id="a2", text="y", score=0.8, unit="a")]
    >>> sorted(len(g) for g in partition_voters(d, m=2, k=1, rng=1))
    [0, 2]
    """
    n_voters = positive_int("m", m)
    per_voter = positive_int("k", k)
    if isinstance(docs, (str, bytes)) or not all(isinstance(d, ScoredDocument) for d in docs):
        raise TypeError("docs must be a sequence of ScoredDocument")
    total = n_voters * per_voter
    chosen = list(docs[:total])
    chosen += [ScoredDocument.padding(i) for i in range(total - len(chosen))]

    groups: dict[str, list[ScoredDocument]] = {}
    for doc in chosen:
        key = doc.id if doc.is_padding else doc.unit
        groups.setdefault(key, []).append(doc)
    ordered = list(groups.values())

    order = make_rng(rng).permutation(len(ordered))
    voters: list[list[ScoredDocument]] = [[] for _ in range(n_voters)]
    for position, index in enumerate(order.tolist()):
        voters[position % n_voters].extend(ordered[index])
    return voters
