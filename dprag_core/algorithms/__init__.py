"""Answer mechanisms: DP token voting, baselines (more are added by their modules).

>>> from dprag_core.algorithms import DPSparseVote, NonRAG
>>> DPSparseVote.name, NonRAG.name
('DPSparseVote', 'NonRAG')
"""

from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG, VoteRAG
from dprag_core.algorithms.dpvote import DPSparseVote, DPVote

__all__ = ["RAG", "DPSparseVote", "DPVote", "Mechanism", "NonRAG", "VoteRAG"]
