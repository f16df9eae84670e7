"""MuRAG-Ada's private threshold: walk public score bins with noisy prefix sums.

MuRAG-Ada (multi-query DP RAG paper, Alg. 2, lines 2-10): the score range is cut
into public bins, walked from the most to the least relevant. At bin i the walk
adds the bin's count plus fresh noise to a running sum and halts as soon as the
noisy sum exceeds ``target`` (K). The output is the number of bins visited: the
released, query-specific threshold is that bin's lower edge.

Privacy claim: ``epsilon``-DP (pure) with respect to adding or removing one
privacy unit, provided each unit falls in at most one bin (the bins are
disjoint), so one neighbour changes one count by 1 (L1 sensitivity 1). Each
count gets its own noise, discrete Laplace with scale 1/epsilon
(P[X = x] ∝ exp(−epsilon·|x|)); the vector of noisy counts is epsilon-DP by
parallel composition over disjoint bins, and the stopping index is
post-processing of it (the unit's bin is read only if the walk reaches it, and
whether it does depends only on earlier bins). For individual accounting
(MuRAG-Ada) the bound is per unit: a unit in a bin that was not visited had no
influence on the output, so only units in visited bins are charged epsilon.
The noise is an exact integer sampler, so nothing depends on floating-point
noise bits (Mironov 2012), and the output distribution is exactly computable.

>>> noisy_bin_walk([0, 5, 40, 3], epsilon=50.0, target=10, rng=0)
3
"""

from __future__ import annotations

from collections.abc import Iterable

from dprag_core.mechanisms.noise import discrete_laplace
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import nonnegative_finite, positive_finite

__all__ = ["noisy_bin_walk"]


def noisy_bin_walk(
    bin_counts: Iterable[int], *, epsilon: float, target: float, rng: RngLike = None
) -> int:
    """Number of bins visited before the noisy prefix sum first exceeds ``target``.

    ``bin_counts``: the (non-negative integer) number of units per bin, most
    relevant bin first. It is consumed lazily: once the walk halts at bin i,
    bin i+1 is never read, so a caller may charge each bin's units inside a
    generator as the walk reaches it. Returns a number in 1..B (B when the sum
    never exceeds ``target``; then every bin was visited). epsilon-DP as stated
    in the module docstring.

    >>> noisy_bin_walk([100, 0], epsilon=10.0, target=5, rng=1)
    1
    """
    eps = positive_finite("epsilon", epsilon)
    goal = nonnegative_finite("target", target)
    gen = make_rng(rng)
    total = 0
    visited = 0
    for count in bin_counts:
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise ValueError(f"bin_counts must be non-negative integers, got {count!r}")
        visited += 1
        total += int(count) + discrete_laplace(1.0 / eps, rng=gen)
        if total > goal:
            return visited
    if visited == 0:
        raise ValueError("bin_counts must contain at least one bin")
    return visited
