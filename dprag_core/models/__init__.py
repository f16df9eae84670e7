"""Model protocols; the transformers backend is :mod:`dprag_core.models.hf` (lazy).

``import dprag_core.models`` does not import torch or transformers: import
``dprag_core.models.hf`` explicitly for :class:`HFTokenModel` / :class:`HFTextModel`.

>>> from dprag_core.models import TokenModel
>>> TokenModel.__name__
'TokenModel'
"""

from dprag_core.models.base import (
    LogprobModel,
    LogprobSession,
    LookaheadModel,
    LookaheadSession,
    PerPromptTextModel,
    TextModel,
    TokenModel,
    TokenSession,
)

__all__ = [
    "LogprobModel",
    "LogprobSession",
    "LookaheadModel",
    "LookaheadSession",
    "PerPromptTextModel",
    "TextModel",
    "TokenModel",
    "TokenSession",
]
