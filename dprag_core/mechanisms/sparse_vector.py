"""AboveThreshold, the sparse vector technique (Dwork & Roth 2014, Alg. 1).

The public threshold T gets noise Lap(2Δ/ε) once; each query value q gets fresh
noise Lap(4Δ/ε) and is answered "above" when q + ν ≥ T + ρ. After every "above"
the run halts and a new one starts: the noisy threshold is re-drawn.

Claim: for a stream of queries each with sensitivity ≤ Δ (``sensitivity``) under
add/remove of one privacy unit — the queries may be chosen adaptively — each run
(from the start or from the last "above" up to and including the next "above", or
to the end of the stream) is ε-DP (Dwork & Roth Thm 3.23); "below" answers cost
nothing beyond their run. By sequential composition the whole interaction is
ε·(``above_count`` + 1)-DP, or ε·``above_count`` if it ends on an "above": charge ε
before the first query and again after every "above" (charge before release).
SVT is *not* bounded-range: do not use the zCDP/bounded-range bound to compose it.

The noisy threshold is private state and never appears in ``repr``.

>>> svt = AboveThreshold(threshold=5.0, epsilon=1.0, rng=0)
>>> svt.test(-100.0), svt.test(100.0), svt.above_count
(False, True, 1)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dprag_core.mechanisms.rng import RngLike, make_rng
from dprag_core.validation import finite, positive_finite, positive_int, strict_init

__all__ = ["AboveThreshold", "AboveThresholdBatch"]


class AboveThresholdBatch:
    """``runs`` independent AboveThreshold instances answered in lockstep (vectorised).

    Each run has the claim of the module docstring (ε-DP per run, one run per
    "above", threshold re-drawn after every "above"); ``above_counts[i]`` is run
    i's number of "above" answers. :class:`AboveThreshold` is the case
    ``runs == 1``; DPSparseVote's batched rule and the audits use many runs at once.
    The noisy thresholds are private state.

    >>> batch = AboveThresholdBatch(threshold=0.0, epsilon=1.0, runs=3, rng=0)
    >>> batch.test(1e6).tolist(), batch.above_counts.tolist()
    ([True, True, True], [1, 1, 1])
    """

    @strict_init
    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float,
        sensitivity: float = 1.0,
        runs: int = 1,
        rng: RngLike = None,
    ) -> None:
        self._threshold = finite("threshold", threshold)
        eps = positive_finite("epsilon", epsilon)
        delta_q = positive_finite("sensitivity", sensitivity)
        self._runs = positive_int("runs", runs)
        self._threshold_scale = 2.0 * delta_q / eps
        self._query_scale = 4.0 * delta_q / eps
        self._rng = make_rng(rng)
        self._noisy_threshold = self._draw_thresholds(self._runs)
        self.above_counts = np.zeros(self._runs, dtype=np.int64)

    def _draw_thresholds(self, n: int) -> NDArray[np.float64]:
        return self._threshold + self._rng.laplace(0.0, self._threshold_scale, n)

    def test(self, values: ArrayLike) -> NDArray[np.bool_]:
        """Answer one query per run; re-draw the noisy threshold of every run that said above.

        ``values`` is one value for all runs or one per run.

        >>> batch = AboveThresholdBatch(threshold=0.0, epsilon=1.0, runs=2, rng=0)
        >>> batch.test([-1e6, 1e6]).tolist()
        [False, True]
        """
        q = np.broadcast_to(np.asarray(values, dtype=np.float64), (self._runs,))
        if not np.all(np.isfinite(q)):
            raise ValueError("value must be a finite number")
        noisy = q + self._rng.laplace(0.0, self._query_scale, self._runs)
        above = noisy >= self._noisy_threshold
        n_above = int(above.sum())
        if n_above:
            self._noisy_threshold[above] = self._draw_thresholds(n_above)
            self.above_counts += above
        return above


class AboveThreshold:
    """Sparse vector technique: ε-DP per run, one run per "above" (module docstring).

    ``threshold`` is public; ``sensitivity`` bounds each query's sensitivity.

    >>> svt = AboveThreshold(threshold=0.0, epsilon=2.0, rng=3)
    >>> [svt.test(v) for v in (-50.0, 50.0)]
    [False, True]
    """

    @strict_init
    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float,
        sensitivity: float = 1.0,
        rng: RngLike = None,
    ) -> None:
        self._core = AboveThresholdBatch(
            threshold=threshold, epsilon=epsilon, sensitivity=sensitivity, runs=1, rng=rng
        )
        self._public = (float(threshold), float(epsilon), float(sensitivity))

    def test(self, value: float) -> bool:
        """True when ``value`` + noise is at or above the noisy threshold ("above").

        >>> AboveThreshold(threshold=0.0, epsilon=1.0, rng=0).test(1e6)
        True
        """
        return bool(self._core.test(finite("value", value))[0])

    @property
    def above_count(self) -> int:
        """How many "above" answers were given (each ends a run that cost ε)."""
        return int(self._core.above_counts[0])

    def __repr__(self) -> str:
        threshold, epsilon, sensitivity = self._public
        return (
            f"AboveThreshold(threshold={threshold!r}, epsilon={epsilon!r}, "
            f"sensitivity={sensitivity!r}, above_count={self.above_count})"
        )
