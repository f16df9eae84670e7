"""Reading a saved DP SimHash artifact without trusting it.

An artifact is an ``.npz`` (a zip of ``.npy`` arrays, no pickle). Before any
array is allocated, every member's ``.npy`` header is read and checked: the
set of member names, each dtype (no objects), each shape, and the total
decompressed size against ``max_bytes`` (a 500 kB file can otherwise expand to
gigabytes). The values are then checked for consistency (shapes agree with
``tables``, ``bits`` and ``num_classes``; bucket ids in range; hyperplanes
finite). Every failure is a ``ValueError`` that names ``path``.

The (ε, δ) recorded in a file is a **claim of whoever wrote it**: loading
cannot verify that the counts were released with that noise. Load artifacts
only from a writer you trust to have run ``DPSimHashDatastore.release``.

>>> read_artifact("missing.npz", max_bytes=1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
FileNotFoundError: ...
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_MAX_BYTES", "FORMAT", "read_artifact"]

FORMAT = "dprag-simhash-v1"
DEFAULT_MAX_BYTES = 1 << 30
"""Default bound on an artifact's decompressed size (1 GiB)."""

_I8, _F8 = np.dtype("<i8"), np.dtype("<f8")
# member -> (dtype, number of dimensions); "format" is a short unicode scalar
_MEMBERS: dict[str, tuple[np.dtype[Any] | None, int]] = {
    "format": (None, 0),
    "num_classes": (_I8, 0),
    "epsilon": (_F8, 0),
    "delta": (_F8, 0),
    "hyperplanes": (np.dtype("<f4"), 3),
    "dense": (_I8, 3),
    "sparse_table": (_I8, 1),
    "sparse_bucket": (_I8, 1),
    "sparse_votes": (_I8, 2),
}
_SCALARS = {"format", "num_classes", "epsilon", "delta"}
_DENSE = {"hyperplanes", "dense"}
_SPARSE = {"hyperplanes", "sparse_table", "sparse_bucket", "sparse_votes"}


def _bad(why: str) -> ValueError:
    return ValueError(f"path is not a valid {FORMAT} artifact: {why}")


def _header(zf: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    with zf.open(member) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        except ValueError:
            raise _bad(f"member {member!r} is not a .npy array") from None
    return shape, dtype


def _check_headers(zf: zipfile.ZipFile, max_bytes: int) -> dict[str, tuple[int, ...]]:
    names = {n.removesuffix(".npy") for n in zf.namelist()}
    arrays = names - set(_SCALARS)
    if not names >= _SCALARS or arrays not in (_DENSE, _SPARSE):
        raise _bad("unexpected members (not written by DPSimHashDatastore.save)")
    shapes, total = {}, 0
    for name in sorted(names):
        shape, dtype = _header(zf, f"{name}.npy")
        want, ndim = _MEMBERS[name]
        text_ok = want is None and dtype.kind == "U" and dtype.itemsize <= 256
        if not (text_ok or dtype == want):
            raise _bad(f"{name} has dtype {dtype.str}")
        if len(shape) != ndim:
            raise _bad(f"{name} has shape {shape}")
        total += math.prod(shape) * dtype.itemsize
        if total > max_bytes:
            raise ValueError(
                f"path holds more than max_bytes={max_bytes} bytes once decompressed; "
                "raise max_bytes if this artifact is trusted"
            )
        shapes[name] = shape
    return shapes


def read_artifact(path: str | Path, *, max_bytes: int) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a saved artifact, checked (headers first, then values).

    >>> import tempfile, os
    >>> bad = os.path.join(tempfile.mkdtemp(), "x.npz")
    >>> _ = open(bad, "wb").write(os.urandom(64))
    >>> read_artifact(bad, max_bytes=1 << 20)
    Traceback (most recent call last):
    ...
    ValueError: path is not a valid dprag-simhash-v1 artifact: not a zip file
    """
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise _bad("not a zip file") from None
    with zf:
        shapes = _check_headers(zf, max_bytes)
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in shapes}
        except (ValueError, OSError, zipfile.BadZipFile, EOFError):
            raise _bad("a member is truncated or corrupt") from None
    _check_values(arrays)
    return arrays


def _check_values(a: dict[str, npt.NDArray[Any]]) -> None:
    if str(a["format"]) != FORMAT:
        raise _bad("wrong format tag")
    tables, bits, dim = a["hyperplanes"].shape
    c = int(a["num_classes"])
    if tables < 1 or not 1 <= bits <= 62 or dim < 1 or c < 2:
        raise _bad(f"tables={tables}, bits={bits}, dim={dim}, num_classes={c} out of range")
    if not np.isfinite(a["hyperplanes"]).all():
        raise _bad("hyperplanes are not finite")
    if "dense" in a:
        if a["dense"].shape != (tables, 1 << bits, c):
            raise _bad(f"dense has shape {a['dense'].shape}, expected {(tables, 1 << bits, c)}")
        return
    t, b, votes = a["sparse_table"], a["sparse_bucket"], a["sparse_votes"]
    if not t.shape[0] == b.shape[0] == votes.shape[0] or votes.shape[1] != c:
        raise _bad("sparse_table, sparse_bucket and sparse_votes disagree in shape")
    if t.size and (t.min() < 0 or t.max() >= tables or b.min() < 0 or b.max() >= 1 << bits):
        raise _bad("a sparse table or bucket id is out of range")
    if np.unique(np.stack([t, b], axis=1), axis=0).shape[0] != t.size:
        raise _bad("a sparse bucket appears twice")
