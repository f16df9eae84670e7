"""dprag_core.mechanisms: the DP noise primitives, pure functions over numpy arrays.

Each one (Laplace and Gumbel noise, the exponential mechanism, LimitedDomain,
AboveThreshold, the DP threshold, ...) states its claim and answers nothing on
its own. The answering mechanisms users build with (``DPSparseVote``,
``DPKSA``, ``MuRAG``, ... and their base ``Mechanism``) compose these
primitives and live in :mod:`dprag_core.algorithms`.

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
