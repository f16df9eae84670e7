"""Retrieved documents, retrieval above a public threshold, DP selection, voter partitioning.

>>> from dprag_core.retrieval import ScoredDocument, partition_voters
>>> len(partition_voters([ScoredDocument(id="a", text="t", score=1.0)], m=2, k=1, rng=0))
2
"""

from dprag_core.retrieval.above import Retriever, retrieve_above
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import PADDING_PREFIX, ScoredDocument, stable_id
from dprag_core.retrieval.partition import partition_voters
from dprag_core.retrieval.threshold import DPThreshold

__all__ = [
    "PADDING_PREFIX",
    "DPThreshold",
    "HonoursK",
    "Retriever",
    "ScoredDocument",
    "partition_voters",
    "retrieve_above",
    "stable_id",
]
