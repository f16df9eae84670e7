"""Retention of claimed and charged query ids: prune before a public watermark, still refuse.

A query id buys at most one release, so every id a store has seen must stay
refused forever; kept as text with its rows, that record grows without bound
(10^6 queries of 10 units: about 1.2 GiB of SQLite audit rows). Pruning keeps
the promise in a fraction of the space: ``prune(before=W)`` deletes the rows
(claims, audit or charge rows) stamped before the **watermark** ``W`` and
keeps, for each of their query ids, an 8-byte digest (:func:`digest`) in the
store's ``pruned`` table, which every later claim and charge consults. Reusing a
pruned id is refused as before; a fresh id is refused by mistake only if its
digest collides with a pruned one's (probability below n / 2^64 per id for n
pruned ids).

The watermark is a time the operator chooses (e.g. "everything older than 90
days", after exporting it for the compliance record): it is public and never
depends on the corpus. It only moves forward and never past now
(:func:`check_watermark`); what stays exact is every total (spent, what each
unit has left, queries, refusals), which the stores keep apart from the rows.
The append-only triggers let a row go only when it is older than the store's
recorded watermark.

>>> digest("q1") == digest("q1"), digest("q1") == digest("q2")
(True, False)
>>> check_watermark(1.0, recorded_us=2_000_000)
Traceback (most recent call last):
...
ValueError: before must be later than the store's watermark 1970-01-01T00:00:02+00:00 ...
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import datetime, timezone

__all__ = ["check_watermark", "digest", "to_watermark"]


def digest(query_id: str) -> int:
    """The 8-byte digest a pruned query id is remembered by (a signed 64-bit integer)."""
    raw = hashlib.blake2b(query_id.encode("utf-8"), digest_size=8, person=b"dprag-query-id")
    return int.from_bytes(raw.digest(), "big", signed=True)


def to_watermark(before: float) -> int:
    """``before`` (UNIX seconds) as the store's watermark: integer microseconds."""
    return int(before * 1_000_000)


def _utc(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, tz=timezone.utc).isoformat(timespec="seconds")


def check_watermark(before: object, *, recorded_us: int, now: float | None = None) -> int:
    """``before`` checked as a new watermark (later than the recorded one, not in the
    future); returns it in microseconds.

    >>> check_watermark(10.0, recorded_us=0, now=20.0)
    10000000
    """
    if isinstance(before, bool) or not isinstance(before, (int, float)):
        raise ValueError(f"before must be a finite UNIX time in seconds, got {before!r}")
    if not math.isfinite(before):
        raise ValueError(f"before must be a finite UNIX time in seconds, got {before!r}")
    now = time.time() if now is None else now
    if before > now:
        raise ValueError(f"before must not be in the future (now {_utc(to_watermark(now))})")
    watermark = to_watermark(before)
    if watermark <= recorded_us:
        raise ValueError(
            f"before must be later than the store's watermark {_utc(recorded_us)} "
            "(a watermark only moves forward)"
        )
    return watermark
