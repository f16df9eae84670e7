"""dprag_core.mechanisms: pure DP mechanisms over numpy arrays, each with its claim.

>>> from dprag_core.mechanisms import exponential_mechanism
>>> exponential_mechanism([0.0, 50.0], epsilon=1.0, rng=0)
1
"""

from dprag_core.mechanisms.exponential import exponential_mechanism, exponential_probabilities
from dprag_core.mechanisms.limited_domain import limited_domain_top1
from dprag_core.mechanisms.noise import discrete_laplace, gaussian, gumbel, laplace
from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.mechanisms.sparse_vector import AboveThreshold
from dprag_core.mechanisms.sparse_vote import SparseVoteRule

__all__ = [
    "AboveThreshold",
    "RngLike",
    "SparseVoteRule",
    "discrete_laplace",
    "exponential_mechanism",
    "exponential_probabilities",
    "gaussian",
    "gumbel",
    "laplace",
    "limited_domain_top1",
    "make_rng",
]
