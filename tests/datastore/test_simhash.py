"""DP SimHash datastore: sensitivity, calibration, artifact contents, audit + mutation."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

import dprag_core.datastore.simhash as simhash
from dprag_core.audit import audit_epsilon
from dprag_core.budget import Budget
from dprag_core.datastore import DPSimHashDatastore, SimHashIndex


def _data(n: int = 300, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, dim)) * 3
    labels = rng.integers(0, 3, n)
    return centres[labels] + rng.normal(size=(n, dim)), labels


def test_one_record_touches_one_bucket_per_table() -> None:
    keys, labels = _data()
    small = DPSimHashDatastore.non_private(keys[:-1], labels[:-1], num_classes=3, tables=6, bits=5)
    full = DPSimHashDatastore.non_private(keys, labels, num_classes=3, tables=6, bits=5)
    diff = full._dense - small._dense  # type: ignore[operator]
    assert diff.sum() == 6 and np.abs(diff).sum() == 6
    assert (diff.reshape(6, -1).sum(axis=1) == 1).all()


def test_hyperplanes_do_not_depend_on_data() -> None:
    keys, labels = _data()
    store = DPSimHashDatastore.release(
        keys, labels, num_classes=3, epsilon=1.0, tables=4, bits=3, hyperplane_seed=9, rng=1
    )
    expected = SimHashIndex.from_seed(dim=16, tables=4, bits=3, seed=9).hyperplanes
    np.testing.assert_array_equal(store.index.hyperplanes, expected)


def test_noise_scale_is_tables_over_epsilon_on_every_bucket() -> None:
    keys, labels = _data(n=50)
    eps, tables = 2.0, 4
    exact = DPSimHashDatastore.non_private(keys, labels, num_classes=3, tables=tables, bits=10)
    store = DPSimHashDatastore.release(
        keys, labels, num_classes=3, epsilon=eps, tables=tables, bits=10, rng=3
    )
    noise = (store._dense - exact._dense).ravel()  # type: ignore[operator]
    p = math.exp(-eps / tables)
    assert noise.var() == pytest.approx(2 * p / (1 - p) ** 2, rel=0.05)
    empty = (exact._dense == 0).ravel()  # type: ignore[union-attr]
    assert empty.mean() > 0.9
    # empty buckets carry noise too: P[Z != 0] = 2p / (1 + p)
    assert (noise[empty] != 0).mean() == pytest.approx(2 * p / (1 + p), abs=0.01)
    assert np.issubdtype(store._dense.dtype, np.integer)  # type: ignore[union-attr]


def test_determinism_from_seeds() -> None:
    keys, labels = _data()
    a = DPSimHashDatastore.release(keys, labels, num_classes=3, epsilon=1.0, bits=4, rng=5)
    b = DPSimHashDatastore.release(keys, labels, num_classes=3, epsilon=1.0, bits=4, rng=5)
    np.testing.assert_array_equal(a._dense, b._dense)  # type: ignore[arg-type]


def test_saved_artifact_holds_no_raw_data(tmp_path: Path) -> None:
    keys, labels = _data()
    store = DPSimHashDatastore.release(keys, labels, num_classes=3, epsilon=4.0, bits=4, rng=0)
    path = tmp_path / "store.npz"
    store.save(path)
    with zipfile.ZipFile(path) as zf:
        names = sorted(zf.namelist())
    assert names == sorted(
        f"{k}.npy" for k in ("format", "hyperplanes", "num_classes", "epsilon", "delta", "dense")
    )
    with np.load(path, allow_pickle=False) as data:
        for name in data.files:
            arr = data[name]
            assert arr.shape[:1] != (len(keys),) or name == "hyperplanes"
            assert not np.isin(keys.astype(np.float32).ravel()[:50], arr.ravel()).any()
        assert data["dense"].shape == (16, 16, 3)  # every bucket, not only non-empty ones
    loaded = DPSimHashDatastore.load(path)
    np.testing.assert_array_equal(loaded.predict(keys), store.predict(keys))
    assert loaded.guarantee == Budget(4.0)
    assert "dense" in repr(loaded)


def test_non_private_store_cannot_be_saved(tmp_path: Path) -> None:
    keys, labels = _data()
    store = DPSimHashDatastore.non_private(keys, labels, num_classes=3)
    with pytest.raises(ValueError, match="non_private"):
        store.save(tmp_path / "x.npz")


def test_accuracy_on_separable_data_and_batched_queries() -> None:
    keys, labels = _data(n=2000)
    store = DPSimHashDatastore.release(
        keys, labels, num_classes=3, epsilon=5.0, tables=16, bits=6, rng=0
    )
    test_keys, test_labels = _data(n=500, seed=0)
    assert (store.predict(test_keys) == test_labels).mean() > 0.9
    one_by_one = np.array([store.predict(k[None])[0] for k in test_keys[:20]])
    np.testing.assert_array_equal(one_by_one, store.predict(test_keys[:20]))


def test_sparse_release_threshold_and_roundtrip(tmp_path: Path) -> None:
    keys, labels = _data(n=2000)
    store = DPSimHashDatastore.release(
        keys, labels, num_classes=3, epsilon=4.0, tables=8, bits=4, sparse=True, delta=1e-6, rng=0
    )
    assert store.guarantee == Budget(4.0, 1e-6)
    assert (store.predict(keys) == labels).mean() > 0.8
    scale = 2 * 8 / 4.0
    tau = simhash._sparse_threshold(tables=8, scale=scale, delta=1e-6)
    p = math.exp(-1 / scale)
    assert 8 * p ** (tau - 1) / (1 + p) <= 1e-6 < 8 * p ** (tau - 2) / (1 + p)
    path = tmp_path / "sparse.npz"
    store.save(path)
    np.testing.assert_array_equal(DPSimHashDatastore.load(path).predict(keys), store.predict(keys))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"bits": 30}, "bits"),
        ({"bits": 0}, "bits"),
        ({"tables": 0}, "tables"),
        ({"num_classes": 1}, "num_classes"),
        ({"labels": np.full(300, 7)}, "labels"),
        ({"sparse": True, "delta": 0.0}, "delta"),
        ({"delta": 1e-6}, "delta"),
        ({"keys": np.full((300, 16), np.nan)}, "keys"),
    ],
)
def test_bad_input(kwargs: dict[str, object], name: str) -> None:
    keys, labels = _data()
    args: dict[str, object] = {"num_classes": 3, "epsilon": 1.0, "keys": keys, "labels": labels}
    args.update(kwargs)
    k, y = args.pop("keys"), args.pop("labels")
    with pytest.raises((ValueError, TypeError), match=name):
        DPSimHashDatastore.release(k, y, **args)  # type: ignore[arg-type]


def _audit_release(trials: int) -> float:
    """Release {r} vs {} with L=2 tables; output = clipped sum of r's two cells.

    Runs the release's own noise step on ``trials`` stacked count tensors at once.
    """
    keys = np.ones((1, 2))
    index = SimHashIndex.from_seed(dim=2, tables=2, bits=1, seed=3)
    exact = simhash._dense_counts(index.buckets(keys), np.zeros(1, dtype=np.int64), index, 2)
    cells = (np.arange(2), index.buckets(keys)[0], 0)
    rng = np.random.default_rng(11)

    def run(counts: np.ndarray) -> np.ndarray:
        stacked = np.broadcast_to(counts, (trials, *counts.shape))
        noisy = simhash._pure_release_noise(stacked, tables=2, epsilon=1.0, rng=rng)
        return np.clip(noisy[(slice(None), *cells)].sum(axis=1), -6, 8)

    return audit_epsilon(run(exact), run(np.zeros_like(exact))).epsilon_lower_bound


def test_release_audit_and_mutation(monkeypatch: pytest.MonkeyPatch) -> None:
    claim = 1.0
    measured = _audit_release(200_000)
    assert 0.5 < measured <= claim  # within the claim, and the audit has power

    real = simhash.discrete_laplace

    def broken(scale: float, **kw: object) -> np.ndarray:  # forgets the factor L = 2
        return real(scale / 2, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(simhash, "discrete_laplace", broken)
    assert _audit_release(200_000) > claim
