"""Answer mechanisms: every algorithm of the five papers and the non-private baselines.

>>> from dprag_core.algorithms import DPKSA, DPSparseVote, MuRAG, NonRAG
>>> DPSparseVote.name, DPKSA.name, MuRAG.name, NonRAG.name
('DPSparseVote', 'DPKSA', 'MuRAG', 'NonRAG')
"""

from dprag_core.algorithms.base import Mechanism, StreamingMechanism
from dprag_core.algorithms.baselines import RAG, NonRAG, VoteRAG
from dprag_core.algorithms.dpvote import DPSparseVote, DPVote
from dprag_core.algorithms.icl import DPICL
from dprag_core.algorithms.ksa import DPKSA, KSA
from dprag_core.algorithms.murag import MuRAG, MuRAGAda, NaiveMulti
from dprag_core.algorithms.threshold import DPThreshold

__all__ = [
    "DPICL",
    "DPKSA",
    "KSA",
    "RAG",
    "DPSparseVote",
    "DPThreshold",
    "DPVote",
    "Mechanism",
    "MuRAG",
    "MuRAGAda",
    "NaiveMulti",
    "NonRAG",
    "StreamingMechanism",
    "VoteRAG",
]
