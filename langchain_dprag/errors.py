"""The error raised when something fails while private documents are in use.

Exception messages are a side door: a tokenizer, a vector store or a model
client may quote its input in an error. Failures during retrieval or
generation are therefore re-raised as :class:`PrivateDataError`, naming only
the stage, the mechanism and the original exception *type*; the original
message and traceback are dropped. (``PrivacyBudgetExhausted``, whose message
holds only budgets and counts, passes through unchanged.)

>>> str(PrivateDataError.withheld("generation", "DPKSA", "KeyError"))[:44]
'generation failed in DPKSA with KeyError (me'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from dprag_core.budget import PrivacyBudgetExhausted

__all__ = ["PrivateDataError", "guarded"]

T = TypeVar("T")


class PrivateDataError(RuntimeError):
    """A failure while private documents were in use; its original message is withheld."""

    @classmethod
    def withheld(cls, stage: str, where: str, kind: str) -> PrivateDataError:
        """The error for a failure of type ``kind`` during ``stage`` in ``where``."""
        return cls(
            f"{stage} failed in {where} with {kind} "
            "(message withheld: it may quote private documents)"
        )


def guarded(stage: str, where: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; re-raise any failure (but a budget refusal) as a PrivateDataError.

    The new error is raised outside the ``except`` block, so it carries no
    ``__context__`` pointing back at the original exception.

    >>> guarded("retrieval", "store", lambda: 3)
    3
    """
    kind = ""
    try:
        return fn()
    except (PrivacyBudgetExhausted, PrivateDataError):
        raise
    except Exception as exc:
        kind = type(exc).__name__
    raise PrivateDataError.withheld(stage, where, kind)
