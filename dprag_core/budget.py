"""Privacy budgets and the exhausted-budget error.

A :class:`Budget` is an (epsilon, delta) pair: a guarantee an answer carries
(:class:`dprag_core.answers.DPAnswer`) or an allowance a corpus budget holds.

>>> Budget(1.0, 1e-6)
Budget(epsilon=1.0, delta=1e-06)
>>> Budget(1.0) + Budget(0.5, 1e-6)
Budget(epsilon=1.5, delta=1e-06)
"""

from __future__ import annotations

from dataclasses import dataclass

from dprag_core.validation import nonnegative_finite, probability, strict_init

__all__ = ["FIT_SLACK", "Budget", "PrivacyBudgetExhausted", "positive_budget"]

FIT_SLACK = 1e-12
"""Relative slack for 'fits within a budget' checks: 100 steps of 0.1 fit in 10."""


@dataclass(frozen=True, order=True)
class Budget:
    """An (epsilon, delta) differential-privacy guarantee or allowance.

    ``epsilon`` must be finite and >= 0 (0: nothing left, as an exhausted
    budget's ``remaining`` says; a total, a cost and a calibration target
    must be > 0, and their users refuse 0); ``delta`` must lie in [0, 1).
    Addition is basic sequential composition. A misspelt keyword is refused
    with the nearest valid one.

    >>> Budget(2.0, 0.0).epsilon
    2.0
    >>> Budget(epsilon=1.0, detla=1e-6)
    Traceback (most recent call last):
    ...
    TypeError: Budget got an unknown keyword argument 'detla'; did you mean 'delta'?
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", nonnegative_finite("epsilon", self.epsilon))
        object.__setattr__(self, "delta", probability("delta", self.delta))

    def __add__(self, other: Budget) -> Budget:
        return Budget(self.epsilon + other.epsilon, min(self.delta + other.delta, 1 - 1e-300))

    def covers(self, other: Budget) -> bool:
        """True when spending ``other`` fits within this allowance.

        >>> Budget(1.0, 1e-6).covers(Budget(0.5, 1e-7))
        True
        """
        return other.epsilon <= self.epsilon * (1 + FIT_SLACK) and other.delta <= self.delta * (
            1 + FIT_SLACK
        )


Budget.__init__ = strict_init(Budget.__init__)  # type: ignore[method-assign]


def positive_budget(name: str, value: object) -> Budget:
    """``value`` as a Budget with epsilon > 0 (a total, a cost, a calibration target).

    >>> positive_budget("total", Budget(0.0))
    Traceback (most recent call last):
    ...
    ValueError: total.epsilon must be > 0, got 0.0
    """
    if not isinstance(value, Budget):
        raise TypeError(f"{name} must be a Budget, got {type(value).__name__}")
    if value.epsilon <= 0:
        raise ValueError(f"{name}.epsilon must be > 0, got {value.epsilon!r}")
    return value


class PrivacyBudgetExhausted(RuntimeError):
    """Raised *before* any work when a query would overspend a privacy budget.

    The message states the requested and remaining budget (and, for per-unit
    ledgers, only how many units lacked budget — never their ids or text).
    """
