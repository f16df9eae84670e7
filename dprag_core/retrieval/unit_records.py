"""A public bound on how many records one privacy unit adds to a partitioned search's scan.

A partitioned search (:mod:`~dprag_core.retrieval.cell_search`) scores every
record of the cells a question probes: that exactness is what its privacy
argument needs, and it makes the scan's time follow how many records those
cells hold. One unit of many records in a probed cell makes every query that
probes it slower, even when none of its records is retrieved. So every dprag
add path of a partitioned store refuses an add that would give one unit more
than ``max_unit_records`` records
(:attr:`~dprag_core.retrieval.cells.PublicPartition.max_unit_records`, default
:data:`DEFAULT_MAX_UNIT_RECORDS`, a public number fixed with the partition):
one unit then adds at most that many records to any scan, and a stopwatch sees
at most that many records' scoring (docs/architecture.md, "What time reveals").

Why the refusal is no leak: it depends only on the records of the unit being
added (those already stored under its key and those in the batch), never on
any other unit's. It is seen by the data owner who adds x, who holds x's
records anyway; whether x's add succeeds says nothing about D. The
neighbouring corpora the DP guarantee compares are D and D + x for every x the
add path accepts, and every accepted x holds at most the bound. A refused add
writes nothing. Its message names the unit key's parameter, the bound and how
to raise it, never a unit or a count (unit keys are private data).

>>> check_unit_records(["p1", "p1", "p2"], lambda unit: 0, bound=2, key="units")
>>> check_unit_records(["p1"], lambda unit: 2, bound=2, key="units")
Traceback (most recent call last):
...
ValueError: this add would give a privacy unit (units) more than max_unit_records = 2 ...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_MAX_UNIT_RECORDS",
    "check_added_units",
    "check_unit_records",
    "unit_bound_error",
]

DEFAULT_MAX_UNIT_RECORDS = 256
"""The default public bound on one privacy unit's records in a partitioned corpus."""


def unit_bound_error(bound: int, key: str) -> ValueError:
    """The refusal: the unit key's parameter, the bound, how to raise it and what that costs.

    >>> str(unit_bound_error(4, "unit_key='who'"))[:58]
    "this add would give a privacy unit (unit_key='who') more t"
    """
    return ValueError(
        f"this add would give a privacy unit ({key}) more than max_unit_records = {bound} "
        "records in this partitioned corpus (nothing was added). A partitioned search scores "
        "every record of the cells a question probes, so the bound is how many records one "
        "unit can add to a query's scan, and its time. Fix: split the unit's text into fewer, "
        "longer records, or raise the bound for the whole corpus: "
        "partition.with_max_unit_records(n) (time can then show up to n records of one unit)"
    )


def check_unit_records(
    units: Iterable[str], stored: Callable[[str], int], *, bound: int, key: str
) -> None:
    """Refuse (ValueError, before anything is written) an add that would put a unit over ``bound``.

    ``units``: the unit of each record to add; ``stored(unit)``: how many
    records of that unit the corpus holds already (called once per distinct
    unit in the batch, only for those units); ``key``: the parameter that
    names the units, for the message.
    """
    for unit, adding in Counter(units).items():
        if adding > bound or stored(unit) + adding > bound:
            raise unit_bound_error(bound, key)


def check_added_units(
    metadatas: Sequence[Mapping[str, Any]],
    unit_key: object,
    *,
    bound: int,
    stored: Callable[[dict[str, Any]], Mapping[str, int]],
    what: str,
) -> None:
    """:func:`check_unit_records` for records that name their unit in ``metadata[unit_key]``.

    ``unit_key`` must be a non-empty string and every record must carry it (a
    record of no unit would escape the bound); ``stored(units)`` gets each
    distinct unit of the add (``str(value)`` -> value) and returns how many
    records the store holds of each (absent: none); ``what`` names a record in
    the messages ("document", "node").

    >>> none = lambda units: {}
    >>> check_added_units([{"who": 1}, {"who": 1}], "who", bound=2, stored=none, what="node")
    >>> check_added_units([{}], "who", bound=2, stored=none, what="node")
    Traceback (most recent call last):
    ...
    ValueError: every node must carry its privacy unit in metadata[unit_key] (unit_key='who'): ...
    """
    if not isinstance(unit_key, str) or not unit_key:
        raise TypeError(f"unit_key must be a non-empty string, got {type(unit_key).__name__}")
    if any(m.get(unit_key) is None for m in metadatas):
        raise ValueError(
            f"every {what} must carry its privacy unit in metadata[unit_key] (unit_key="
            f"{unit_key!r}): a {what} without it belongs to no unit, so no bound holds for it"
        )
    units = {str(m[unit_key]): m[unit_key] for m in metadatas}
    counts = stored(units)
    check_unit_records(
        [str(m[unit_key]) for m in metadatas],
        lambda unit: int(counts.get(unit, 0)),
        bound=bound,
        key=f"unit_key={unit_key!r}",
    )
