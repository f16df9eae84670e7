"""Answering mechanisms: every algorithm of the five papers and the non-private baselines.

Each class here answers a question from retrieved documents and returns a
:class:`~dprag_core.answers.DPAnswer`; their base is :class:`Mechanism`.
They are built from the noise primitives of :mod:`dprag_core.mechanisms`
(exponential mechanism, LimitedDomain, SVT, ...), which answer nothing on their
own. The DP document selector ``DPThreshold`` is not a mechanism: it lives
in :mod:`dprag_core.retrieval`.

>>> from dprag_core.algorithms import DPKSA, DPSparseVote, MuRAG, NonRAG
>>> DPSparseVote.name, DPKSA.name, MuRAG.name, NonRAG.name
('DPSparseVote', 'DPKSA', 'MuRAG', 'NonRAG')
"""

from dprag_core.algorithms.answer_vote import AnswerVote, DPAnswerVote
from dprag_core.algorithms.base import Mechanism
from dprag_core.algorithms.baselines import RAG, NonRAG, VoteRAG
from dprag_core.algorithms.dpvote import DPSparseVote, DPVote
from dprag_core.algorithms.icl import DPICL
from dprag_core.algorithms.ksa import DPKSA, KSA
from dprag_core.algorithms.murag import MuRAG, MuRAGAda, NaiveMulti

__all__ = [
    "DPICL",
    "DPKSA",
    "KSA",
    "RAG",
    "AnswerVote",
    "DPAnswerVote",
    "DPSparseVote",
    "DPVote",
    "Mechanism",
    "MuRAG",
    "MuRAGAda",
    "NaiveMulti",
    "NonRAG",
    "VoteRAG",
]
