"""DPSimHashDatastore.load trusts nothing in the file: headers, dtypes, shapes, sizes."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dprag_core.datastore import DPSimHashDatastore


def _saved(tmp_path: Path, *, sparse: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(50, 4))
    labels = (keys[:, 0] > 0).astype(int)
    store = DPSimHashDatastore.release(
        keys, labels, num_classes=2, epsilon=4.0, tables=2, bits=3, hyperplane_seed=1,
        sparse=sparse, delta=1e-3 if sparse else 0.0, rng=0,
    )  # fmt: skip
    path = tmp_path / "good.npz"
    store.save(path)
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _write(path: Path, arrays: dict[str, object]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, value in arrays.items():
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=True)
            zf.writestr(f"{name}.npy", buf.getvalue())
    return path


def _changed(**changes: object) -> Callable[[dict[str, object]], dict[str, object]]:
    def apply(a: dict[str, object]) -> dict[str, object]:
        out = {**a, **changes}
        return {k: v for k, v in out.items() if v is not None}

    return apply


DENSE_CASES = [
    ("wrong-tag", _changed(format=np.array("other-format")), "format tag"),
    ("dense-shape", _changed(dense=np.zeros((2, 4, 2), dtype=np.int64)), "dense has shape"),
    ("dense-dtype", _changed(dense=np.zeros((2, 8, 2), dtype=np.float64)), "dense has dtype"),
    ("dense-ndim", _changed(dense=np.zeros((32,), dtype=np.int64)), "dense has shape"),
    ("object", _changed(dense=np.array([{"x": 1}], dtype=object)), "dense has dtype"),
    ("classes", _changed(num_classes=np.array(1)), "num_classes=1"),
    ("nan-planes", _changed(hyperplanes=np.full((2, 3, 4), np.nan, np.float32)), "finite"),
    ("planes-dtype", _changed(hyperplanes=np.zeros((2, 3, 4))), "hyperplanes has dtype"),
    ("epsilon", _changed(epsilon=np.array(-1.0)), "epsilon"),
    ("missing", _changed(dense=None), "unexpected members"),
    ("extra", _changed(extra=np.zeros(3)), "unexpected members"),
]


@pytest.mark.parametrize(("case", "edit", "words"), DENSE_CASES, ids=[c[0] for c in DENSE_CASES])
def test_bad_dense_artifacts_are_refused_clearly(
    tmp_path: Path, case: str, edit: Callable[[dict[str, object]], dict[str, object]], words: str
) -> None:
    path = _write(tmp_path / f"{case}.npz", edit(dict(_saved(tmp_path))))
    with pytest.raises(ValueError, match=words) as info:
        DPSimHashDatastore.load(path)
    assert "path" in str(info.value) and "allow_pickle" not in str(info.value)


def test_bad_sparse_artifacts_are_refused_clearly(tmp_path: Path) -> None:
    good = _saved(tmp_path, sparse=True)
    n = good["sparse_table"].size
    for changes, words in (
        ({"sparse_bucket": np.full(n, 99, dtype=np.int64)}, "out of range"),
        ({"sparse_table": np.zeros(n + 1, dtype=np.int64)}, "disagree"),
        ({"sparse_votes": np.zeros((n, 3), dtype=np.int64)}, "disagree"),
    ):
        path = _write(tmp_path / "s.npz", {**good, **changes})
        with pytest.raises(ValueError, match=words):
            DPSimHashDatastore.load(path)
    if n:
        twice = {
            **good,
            "sparse_table": np.zeros(n, np.int64),
            "sparse_bucket": np.zeros(n, np.int64),
        }
        if n > 1:
            with pytest.raises(ValueError, match="twice"):
                DPSimHashDatastore.load(_write(tmp_path / "t.npz", twice))


def test_a_small_file_that_expands_past_max_bytes_is_refused(tmp_path: Path) -> None:
    good = dict(_saved(tmp_path))
    good["hyperplanes"] = np.zeros((2, 20, 4), np.float32)
    good["dense"] = np.zeros((2, 1 << 20, 2), dtype=np.int64)  # 32 MiB of zeros
    path = _write(tmp_path / "bomb.npz", good)
    assert path.stat().st_size < 200_000
    with pytest.raises(ValueError, match="max_bytes=1000000"):
        DPSimHashDatastore.load(path, max_bytes=1_000_000)
    assert DPSimHashDatastore.load(path, max_bytes=1 << 26).index.bits == 20


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, np.random.default_rng(0).bytes(4096)])
def test_random_bytes_are_not_an_artifact(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="not a zip file") as info:
        DPSimHashDatastore.load(path)
    assert "allow_pickle" not in str(info.value)


def test_a_member_that_is_not_npy_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "z.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for name in ("format", "num_classes", "epsilon", "delta", "hyperplanes", "dense"):
            zf.writestr(f"{name}.npy", b"not an array")
    with pytest.raises(ValueError, match=r"not a \.npy array"):
        DPSimHashDatastore.load(path)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "big"])
def test_bad_max_bytes(tmp_path: Path, bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="max_bytes"):
        DPSimHashDatastore.load(tmp_path / "x.npz", max_bytes=bad)  # type: ignore[arg-type]
