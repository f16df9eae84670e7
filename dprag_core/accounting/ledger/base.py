"""The per-privacy-unit ledger contract shared by every backend (MuRAG, DESIGN §5).

A ledger holds, for every privacy unit, the epsilon it has left. Unknown units
start with ``budget_per_unit`` (MuRAG: M·ε_q). :meth:`Ledger.charge` debits one
cost from a set of units **atomically and all-or-nothing**: either every unit
had at least ``cost`` left and all are debited (and one audit row per unit is
appended), or nothing changes and the result names the units that lacked
budget. That list is returned to the caller only; it never appears in an
exception message, a log record or a ``repr``.

Exact arithmetic: costs and budgets are stored as integers in pico-epsilon
(1e-12) units, each rounded to the nearest integer, so that e.g. 100 charges of
0.1 fit exactly in 10.0 and 3 charges of 1/3 fit in 1.0; the audit log then
replays exactly (sum of granted charges == budget − remaining, in integers).
The rounding changes each recorded cost by at most 5e-13, i.e. a unit's true
spend is at most ``budget + (charges + 1)·5e-13`` — the same order as the
relative slack of :meth:`dprag_core.budget.Budget.covers`. Costs and budgets
are limited to ``MAX_EPSILON`` (1e6) so that the integers fit in 64 bits.

>>> from dprag_core.accounting.ledger import InMemoryLedger
>>> led = InMemoryLedger(budget_per_unit=1.0)
>>> led.charge("q1", ["a", "b"], 0.6).granted
True
>>> r = led.charge("q2", ["b", "c"], 0.6)
>>> r.granted, r.lacking
(False, ('b',))
>>> led.remaining(["a", "c"])
{'a': 0.4, 'c': 1.0}
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dprag_core.validation import StrictKeywords, nonnegative_finite, positive_finite

__all__ = [
    "MAX_EPSILON",
    "MAX_ID_BYTES",
    "SCALE",
    "AuditEntry",
    "ChargeResult",
    "Ledger",
    "LedgerOutcomeUnknown",
    "LedgerUnavailable",
    "check_id",
    "check_table",
    "from_units",
    "incomplete",
    "reused_id",
    "same_charge",
    "to_units",
]

SCALE = 10**12
"""Integer units per epsilon (pico-epsilon)."""

MAX_EPSILON = 1e6
"""Largest budget or cost a ledger accepts (keeps integers well inside 64 bits)."""

MAX_ID_BYTES = 1024
"""Longest unit or query id, in UTF-8 bytes, that every backend accepts."""

_NOT_BLANK = re.compile(r"\S")
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,40}")


class LedgerUnavailable(RuntimeError):
    """The ledger's storage cannot be reached or used; nothing was charged or released.

    The message never contains a DSN, a password or a unit id.

    >>> issubclass(LedgerUnavailable, RuntimeError)
    True
    """


class LedgerOutcomeUnknown(LedgerUnavailable):
    """The connection was lost while a charge was in flight: it may or may not be recorded.

    Release nothing. Retry with the **same** query id: a charge whose id is
    already recorded records nothing new and is reported as granted, so the
    retry tells the caller which it was.

    >>> issubclass(LedgerOutcomeUnknown, LedgerUnavailable)
    True
    """


@dataclass(frozen=True)
class ChargeResult:
    """Outcome of :meth:`Ledger.charge`.

    ``granted``: every unit was debited. ``lacking``: the units (sorted) that had
    less than the cost left; empty when granted. For the caller only: never log it.

    >>> ChargeResult(True, ()).granted
    True
    """

    granted: bool
    lacking: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"ChargeResult(granted={self.granted}, lacking={len(self.lacking)} units)"


@dataclass(frozen=True)
class AuditEntry:
    """One granted debit of one unit: who (query), what (unit), how much, when (UNIX s).

    >>> AuditEntry("q1", "doc-7", 0.5, 0.0).cost
    0.5
    """

    query_id: str
    unit: str
    cost: float
    time: float

    def __repr__(self) -> str:
        return f"AuditEntry(query_id={self.query_id!r}, cost={self.cost!r}, time={self.time!r})"


def to_units(name: str, value: object, *, positive: bool = False) -> int:
    """Validate an epsilon amount and convert it to integer pico-epsilon units.

    >>> to_units("cost", 0.1)
    100000000000
    """
    x = positive_finite(name, value) if positive else nonnegative_finite(name, value)
    if x > MAX_EPSILON:
        raise ValueError(f"{name} must be at most {MAX_EPSILON:g}, got {value!r}")
    units = round(x * SCALE)
    if positive and units == 0:
        raise ValueError(f"{name} must be at least 1e-12, got {value!r}")
    return units


def from_units(units: int) -> float:
    """Integer pico-epsilon units back to epsilon.

    >>> from_units(400000000000)
    0.4
    """
    return units / SCALE


def check_id(name: str, value: object) -> str:
    """One id policy for unit and query ids on every backend, checked before any charge.

    An id is a ``str`` with a non-blank character, valid UTF-8 (no lone
    surrogates), no NUL character, and at most :data:`MAX_ID_BYTES` UTF-8
    bytes. Messages name the parameter and never quote the id.

    >>> check_id("query_id", "q1")
    'q1'
    >>> check_id("query_id", "a\\x00b")
    Traceback (most recent call last):
    ...
    ValueError: query_id must not contain a NUL character
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if not _NOT_BLANK.search(value):
        raise ValueError(f"{name} must be a non-empty string (not only whitespace)")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{name} must be valid UTF-8 text (no lone surrogates)") from None
    if size > MAX_ID_BYTES:
        raise ValueError(f"{name} must be at most {MAX_ID_BYTES} UTF-8 bytes, got {size}")
    return value


def check_units(units: Iterable[str]) -> list[str]:
    """Unit ids as a sorted, de-duplicated list (one debit per unit per charge).

    >>> check_units(["b", "a", "b"])
    ['a', 'b']
    """
    if isinstance(units, (str, bytes)):
        raise TypeError("units must be an iterable of unit-id strings, not a single string")
    if not isinstance(units, Iterable):
        raise TypeError(f"units must be an iterable of unit-id strings, got {type(units).__name__}")
    return sorted({check_id("units", u) for u in units})


def reused_id() -> ValueError:
    """The error for a query id already recorded with other units or another cost.

    >>> str(reused_id()).startswith("query_id")
    True
    """
    return ValueError(
        "query_id was already charged with other units or another cost: use a fresh id per charge"
    )


def same_charge(recorded: Iterable[tuple[str, int]], units: list[str], cost: int) -> bool:
    """True when the recorded (unit, cost) rows of a query id are exactly this charge.

    >>> same_charge([("a", 5), ("b", 5)], ["a", "b"], 5), same_charge([("a", 5)], ["a"], 4)
    (True, False)
    """
    return sorted(recorded) == [(u, cost) for u in units]


def check_table(table: object) -> str:
    """A table-name prefix: a lowercase SQL identifier of at most 41 characters.

    >>> check_table("dprag_ledger")
    'dprag_ledger'
    """
    if not isinstance(table, str) or not _TABLE.fullmatch(table):
        raise ValueError("table must match [a-z_][a-z0-9_]{0,40}")
    return table


def incomplete(absent: list[str]) -> str:
    """The message for a partly missing schema (never repaired: that would reset budgets).

    >>> incomplete(["t_units"])[:53]
    'the ledger schema is incomplete (missing: t_units): r'
    """
    return (
        f"the ledger schema is incomplete (missing: {', '.join(absent)}): restore it "
        "from a backup; recreating it would reset budgets"
    )


class Ledger(StrictKeywords, ABC):
    """Per-unit privacy budgets with atomic all-or-nothing charges and an audit log.

    Backends: :class:`~dprag_core.accounting.ledger.InMemoryLedger`,
    :class:`~dprag_core.accounting.ledger.SQLiteLedger` (default; one file, safe
    across processes) and :class:`~dprag_core.accounting.ledger.PostgresLedger`
    (several processes or hosts). Subclasses implement the ``_``-prefixed methods
    on integer units; validation lives here. Every backend's constructor
    refuses an unknown keyword, naming the nearest valid one.

    >>> from dprag_core.accounting.ledger import InMemoryLedger
    >>> InMemoryLedger(budget_per_unit=2.0).active(["x"], 1.5)
    ['x']
    """

    def __init__(self, *, budget_per_unit: float) -> None:
        self._budget = to_units("budget_per_unit", budget_per_unit, positive=True)

    @property
    def budget_per_unit(self) -> float:
        """The epsilon every unit starts with."""
        return from_units(self._budget)

    def charge(self, query_id: str, units: Iterable[str], cost: float) -> ChargeResult:
        """Debit ``cost`` from every unit in ``units``, or from none of them.

        Granted charges append one audit row per (distinct) unit. A charge of
        an empty set is granted and records nothing. Raises ``ValueError`` for
        a negative or non-finite cost and :class:`LedgerUnavailable` when the
        storage fails (then nothing was charged, and nothing may be released).

        A query id names one charge. Charging an id already recorded with the
        same units and cost records nothing new and is granted (a retry after
        :class:`LedgerOutcomeUnknown`); with other units or another cost it
        raises ``ValueError`` (use a fresh id per charge).
        """
        qid = check_id("query_id", query_id)
        cost_units = to_units("cost", cost)
        unit_list = check_units(units)
        if not unit_list:
            return ChargeResult(True, ())
        lacking = self._charge(qid, unit_list, cost_units)
        return ChargeResult(not lacking, tuple(lacking))

    def remaining(self, units: Iterable[str]) -> dict[str, float]:
        """Epsilon left for each unit (``budget_per_unit`` for units never charged)."""
        unit_list = check_units(units)
        return {u: from_units(v) for u, v in self._remaining(unit_list).items()}

    def active(self, units: Iterable[str], min_cost: float) -> list[str]:
        """The units (in input order, de-duplicated) with at least ``min_cost`` left."""
        need = to_units("min_cost", min_cost)
        if isinstance(units, (str, bytes)):
            check_units(units)  # raises: a single string is not a list of units
        ordered = list(dict.fromkeys(units))
        left = self._remaining(check_units(ordered))
        return [u for u in ordered if left[u] >= need]

    def audit_log(self) -> Iterator[AuditEntry]:
        """Every granted debit, oldest first."""
        for qid, unit, cost, at in self._audit_rows():
            yield AuditEntry(qid, unit, from_units(cost), at)

    def total_spent(self) -> float:
        """Corpus-level total: the sum of every granted debit over all units."""
        return from_units(self._total_spent())

    def close(self) -> None:
        """Release connections held by this process (the data stays)."""

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(budget_per_unit={self.budget_per_unit!r})"

    # -- backend primitives (integer pico-epsilon units; units sorted and distinct) --

    @abstractmethod
    def _charge(self, query_id: str, units: list[str], cost: int) -> list[str]:
        """Charge atomically; return the lacking units (empty list = granted).

        If ``query_id`` is already recorded, record nothing: return ``[]`` when
        it was recorded with exactly these units and this cost, else raise
        :func:`reused_id`'s error.
        """

    @abstractmethod
    def _remaining(self, units: list[str]) -> dict[str, int]:
        """Remaining units for each unit id."""

    @abstractmethod
    def _audit_rows(self) -> Iterator[tuple[str, str, int, float]]:
        """(query_id, unit, cost, time) rows, oldest first."""

    @abstractmethod
    def _total_spent(self) -> int:
        """Sum of all granted costs."""
