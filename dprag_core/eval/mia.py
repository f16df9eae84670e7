"""Membership inference against a released SimHash datastore.

The attacker holds the released artifact and queries it freely (the paper's
Sec. 4.2). Per query it reads: the per-class votes, the maximum vote, the vote
confidence (max / total), the vote entropy, the bucket hit rate (fraction of
tables whose bucket holds a positive total) and, when the record's label is
known, the vote for that label. A classifier trained on half of balanced
member / non-member sets is scored on the other half; advantage = accuracy - 0.5.

>>> from dprag_core.datastore import DPSimHashDatastore
>>> rng = np.random.default_rng(0)
>>> keys = rng.normal(size=(40, 4)); labels = rng.integers(0, 2, 40)
>>> store = DPSimHashDatastore.non_private(keys, labels, num_classes=2, tables=4, bits=6)
>>> mia_features(store, keys[:2], labels[:2]).shape
(2, 7)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dprag_core.datastore.simhash import DPSimHashDatastore
from dprag_core.mechanisms.rng import RngLike, make_rng

__all__ = ["MIAResult", "membership_inference", "mia_features"]


@dataclass(frozen=True)
class MIAResult:
    """Attack accuracy on held-out balanced member/non-member queries."""

    accuracy: float
    advantage: float
    n_test: int


def mia_features(
    store: DPSimHashDatastore, keys: npt.ArrayLike, labels: npt.ArrayLike | None = None
) -> npt.NDArray[np.float64]:
    """Attack features of each query, shape [Q, C + 4 (+1 with labels)]."""
    votes = store.bucket_votes(keys).astype(np.float64)  # [Q, L, C]
    per_class = votes.sum(axis=1)
    positive = np.clip(per_class, 0.0, None)
    total = positive.sum(axis=1)
    max_vote = per_class.max(axis=1)
    confidence = np.where(total > 0, positive.max(axis=1) / np.where(total > 0, total, 1), 0.0)
    probs = positive / np.where(total > 0, total, 1.0)[:, None]
    entropy = -(probs * np.log(np.where(probs > 0, probs, 1.0))).sum(axis=1)
    hit_rate = (votes.sum(axis=2) > 0).mean(axis=1)
    columns = [
        per_class,
        max_vote[:, None],
        confidence[:, None],
        entropy[:, None],
        hit_rate[:, None],
    ]
    if labels is not None:
        y = np.asarray(labels, dtype=np.int64)
        columns.append(per_class[np.arange(len(y)), y][:, None])
    return np.concatenate(columns, axis=1)


def membership_inference(
    store: DPSimHashDatastore,
    member_keys: npt.ArrayLike,
    member_labels: npt.ArrayLike,
    non_member_keys: npt.ArrayLike,
    non_member_labels: npt.ArrayLike,
    *,
    rng: RngLike = None,
) -> MIAResult:
    """Train a random forest on half the balanced queries, report accuracy on the rest."""
    from sklearn.ensemble import RandomForestClassifier

    members = np.asarray(member_keys)
    non_members = np.asarray(non_member_keys)
    n = min(len(members), len(non_members))
    if n < 4:
        raise ValueError("member_keys and non_member_keys need at least 4 rows each")
    generator = make_rng(rng)
    x = np.concatenate(
        [
            mia_features(store, members[:n], np.asarray(member_labels)[:n]),
            mia_features(store, non_members[:n], np.asarray(non_member_labels)[:n]),
        ]
    )
    y = np.concatenate([np.ones(n), np.zeros(n)])
    order = generator.permutation(2 * n)
    train, test = order[:n], order[n:]
    seed = int(generator.integers(2**31))
    clf = RandomForestClassifier(n_estimators=100, min_samples_leaf=5, random_state=seed)
    clf.fit(x[train], y[train])
    accuracy = float((clf.predict(x[test]) == y[test]).mean())
    return MIAResult(accuracy=accuracy, advantage=accuracy - 0.5, n_test=len(test))
