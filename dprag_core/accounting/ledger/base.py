"""The per-privacy-unit ledger contract shared by every backend (MuRAG, docs/design.md §5).

A ledger holds, for every privacy unit, the epsilon it has left. Unknown units
start with ``budget_per_unit`` (MuRAG: M·ε_q). :meth:`Ledger.charge` debits one
cost from a set of units **atomically and all-or-nothing**: either every unit
had at least ``cost`` left and all are debited (and one audit row per unit is
appended), or nothing changes and the result names the units that lacked
budget. That list is returned to the caller only; it never appears in an
exception message, a log record or a ``repr``.

A query id buys at most one release. An app records every query's id in the
ledger before the query's private section opens (:meth:`Ledger.claim`), so
that whether an id is refused as reused depends on that record alone, never
on what the query then charged (a charge of an empty set records nothing).
The apps claim with ``durable=False`` and make the claim durable before the
query releases anything (:meth:`Ledger.settle`); its first charge does that
in its own commit, so a query costs one durable commit, not two
(:meth:`Ledger.claim`).
A claim or a charge under an id already recorded is refused (``ValueError``
naming ``query_id``), except as the retry of this ledger object's own claim or
charge whose outcome was unknown (:class:`LedgerOutcomeUnknown`), which is
granted without a new debit and says so (``ChargeResult.retry``); an app's
accepted retry of a query that released nothing charges with ``retry=True``:
what the failed attempt charged stands, never charged twice.

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

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dprag_core.accounting.status import HISTOGRAM_BINS, LedgerStatus
from dprag_core.accounting.stores.amounts import check_id, from_units, to_units
from dprag_core.accounting.stores.errors import LedgerOutcomeUnknown, reused_id
from dprag_core.accounting.stores.retries import PendingRetries
from dprag_core.validation import StrictKeywords

__all__ = [
    "AuditEntry",
    "ChargeResult",
    "Ledger",
    "check_units",
    "histogram_bin",
    "require_distinct",
    "same_charge",
]


@dataclass(frozen=True)
class ChargeResult:
    """Outcome of :meth:`Ledger.charge`.

    ``granted``: every unit was debited. ``lacking``: the units (sorted) that had
    less than the cost left; empty when granted. For the caller only: never log it.
    ``retry``: the charge had already been recorded by this ledger object's own
    earlier attempt, whose outcome was unknown: granted, debited once.

    >>> ChargeResult(True, ()).granted
    True
    """

    granted: bool
    lacking: tuple[str, ...] = ()
    retry: bool = False

    def __repr__(self) -> str:
        return (
            f"ChargeResult(granted={self.granted}, lacking={len(self.lacking)} units, "
            f"retry={self.retry})"
        )


@dataclass(frozen=True)
class AuditEntry:
    """One granted debit of one unit: who (query), what (unit), how much, when (UNIX s).

    >>> AuditEntry("q1", "doc-7", 0.5, 0.0).cost
    0.5
    """

    query_id: str
    unit: str = field(repr=False)  # units stay out of reprs
    cost: float
    time: float


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


def require_distinct(units: list[str]) -> list[str]:
    """``units`` as given, when no unit repeats: a charge debits each unit once and writes
    one audit row for it (the audit log is the budget's own record).

    :meth:`Ledger.charge` de-duplicates; a backend's ``_charge`` refuses repeats.

    >>> require_distinct(["a", "b"])
    ['a', 'b']
    >>> require_distinct(["a", "a"])
    Traceback (most recent call last):
    ...
    ValueError: the charge was refused: a charge needs distinct units
    """
    if len(set(units)) != len(units):
        raise ValueError("the charge was refused: a charge needs distinct units")
    return units


def same_charge(recorded: Iterable[tuple[str, int]], units: list[str], cost: int) -> bool:
    """True when the recorded (unit, cost) rows of a query id are exactly this charge.

    >>> same_charge([("a", 5), ("b", 5)], ["a", "b"], 5), same_charge([("a", 5)], ["a"], 4)
    (True, False)
    """
    return sorted(recorded) == [(u, cost) for u in units]


def histogram_bin(spent: int, budget: int) -> int:
    """The spend-histogram bin of a unit: tenths of its budget spent, the last bin closed.

    The SQL backends compute the same integer expression.

    >>> histogram_bin(0, 10), histogram_bin(5, 10), histogram_bin(10, 10)
    (0, 5, 9)
    """
    return min(spent * HISTOGRAM_BINS // budget, HISTOGRAM_BINS - 1)


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

    label = "in-memory per-unit ledger"
    """What and where the ledger is, as its messages name it."""

    def __init__(self, *, budget_per_unit: float) -> None:
        self._budget = to_units("budget_per_unit", budget_per_unit, positive=True)
        self._pending = PendingRetries()
        self._claims = PendingRetries()
        self._durability = threading.Lock()
        self._visible = 0  # claims made with durable=False by this object, in commit order
        self._durable = 0  # how many of them are durable (a prefix: flushed in commit order)

    @property
    def budget_per_unit(self) -> float:
        """The epsilon every unit starts with."""
        return from_units(self._budget)

    def claim(self, query_id: str, *, durable: bool = True) -> bool:
        """Record ``query_id`` as one query's id, before any of its charges: True.

        Apps claim every query's id here before its private section opens
        (:meth:`dprag_core.pipeline.QueryRun.start`, the ledger filters), so a
        reused id is refused the same way whatever the query would then have
        charged. An id already recorded (claimed, or charged) raises
        ``QueryIdReused`` (a ``ValueError`` naming ``query_id``), except on this
        object after its own claim or charge under that id raised
        :class:`LedgerOutcomeUnknown`: then False (the retry; a claim not
        recorded after all is recorded now, True). Raises
        :class:`LedgerUnavailable` when the storage fails.

        ``durable=False`` (what the apps use): the claim is committed and seen
        by every other claim and charge of the store when this returns, so a
        reuse is refused from then on, but its commit does not wait for the
        disk: it becomes durable with this object's next durable write (a
        charge that is granted or refused) or at :meth:`settle`, which the
        caller must reach before it releases anything of the query. Both
        backends flush in commit order (PostgreSQL's WAL up to a commit
        record holds every record before it; SQLite's fsync of the WAL file
        holds every frame written before it, and a checkpoint that copies
        frames out syncs them first), so a later durable commit carries the
        claim with it. A crash before then loses the claim of a query that
        charged nothing durably and released nothing: the store is as if the
        query had never been claimed, never a release without its record.

        >>> from dprag_core.accounting.ledger import InMemoryLedger
        >>> led = InMemoryLedger(budget_per_unit=1.0)
        >>> led.claim("q1")
        True
        >>> led.claim("q1")
        Traceback (most recent call last):
        ...
        dprag_core.accounting.stores.errors.QueryIdReused: query_id was already recorded ...
        """
        qid = check_id("query_id", query_id)
        if not isinstance(durable, bool):
            raise TypeError(f"durable must be a bool, got {type(durable).__name__}")
        try:
            claimed = self._claim(qid, durable=durable)
        except LedgerOutcomeUnknown:
            self._claims.remember(qid, True)
            raise
        in_doubt = self._claims.take(qid) is not None or self._pending.peek(qid) is not None
        if not claimed and not in_doubt:
            raise reused_id()
        if not durable:  # committed now (a retry's maybe by the attempt in doubt): not durable
            with self._durability:
                self._visible += 1
        return claimed

    def charge(
        self, query_id: str, units: Iterable[str], cost: float, *, retry: bool = False
    ) -> ChargeResult:
        """Debit ``cost`` from every unit in ``units``, or from none of them.

        Granted charges append one audit row per (distinct) unit. A charge of
        an empty set is granted and records nothing. Raises ``ValueError`` for
        a negative or non-finite cost and :class:`LedgerUnavailable` when the
        storage fails (then nothing was charged, and nothing may be released).

        A query id buys at most one release. An id already recorded is
        refused (``ValueError`` naming ``query_id``), with one exception: the
        retry, with the same units and cost, of this object's own charge that
        raised :class:`LedgerOutcomeUnknown`. If that charge was recorded, the
        retry records nothing new and returns ``retry=True``; if not, it is
        charged now.

        ``retry=True`` is for an app's accepted retry of a query that released
        nothing (:mod:`dprag_core.query_ids`): a charge already recorded under
        ``query_id`` stands. Its units are granted again without a new debit
        (``retry=True``), any other unit is reported lacking (an id is charged
        once); with nothing recorded under the id, it is charged as usual.
        """
        qid = check_id("query_id", query_id)
        cost_units = to_units("cost", cost)
        unit_list = check_units(units)
        if not unit_list:
            return ChargeResult(True, ())
        if retry:
            held = {u for u, c in self._recorded(qid) if c == cost_units}
            if held:
                self._pending.take(qid)  # its outcome is known now: recorded
                dropped = tuple(u for u in unit_list if u not in held)
                return ChargeResult(not dropped, dropped, retry=True)
        attempt = (tuple(unit_list), cost_units)
        with self._durability:
            before = self._visible  # claims committed before this charge began
        try:
            outcome, lacking = self._charge(qid, unit_list, cost_units)
        except LedgerOutcomeUnknown:
            self._pending.remember(qid, attempt)
            raise
        if outcome != "recorded":  # a write, committed durably: the claims before it too
            self._made_durable(before)
        if outcome == "recorded":
            if self._pending.peek(qid) != attempt:
                raise reused_id()
            self._pending.take(qid)
            return ChargeResult(True, (), retry=True)
        self._pending.take(qid)  # its outcome is known now
        return ChargeResult(not lacking, tuple(lacking))

    def settle(self) -> None:
        """Make every claim this object made with ``durable=False`` durable; on return
        nothing of their queries is released without its record.

        Without a store call when a durable write of this object (a charge
        granted or refused) already carried them (:meth:`claim`), else one
        durable commit: SQLite fsyncs the WAL file, PostgreSQL commits a
        one-row write and waits for its WAL flush. An app settles once per
        query, after its charges and before its release, so a query makes one
        durable commit in its ledger step whatever it charged. Raises
        :class:`LedgerUnavailable` when the storage fails (then release nothing).

        >>> from dprag_core.accounting.ledger import InMemoryLedger
        >>> led = InMemoryLedger(budget_per_unit=1.0)
        >>> led.claim("q1", durable=False), led.settle()
        (True, None)
        """
        with self._durability:
            target = self._visible
            if target <= self._durable:
                return
        self._settle()
        self._made_durable(target)

    def _made_durable(self, claims: int) -> None:
        """The first ``claims`` claims made with ``durable=False`` are durable now."""
        with self._durability:
            self._durable = max(self._durable, claims)

    def unknown_charge(self, query_id: str) -> list[str] | None:
        """The units of this object's own charge under ``query_id`` whose outcome is unknown.

        None when there is none. :func:`~dprag_core.accounting.ledger.charge_active`
        retries with exactly these units.
        """
        attempt = self._pending.peek(query_id)
        return None if attempt is None else list(attempt[0])

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

    def audit_log(self, *, last: int | None = None) -> Iterator[AuditEntry]:
        """Every granted debit, oldest first; ``last``: only the last ``last`` of them (an
        indexed read on the durable stores, whatever the log's length).

        >>> from dprag_core.accounting.ledger import InMemoryLedger
        >>> led = InMemoryLedger(budget_per_unit=1.0)
        >>> _ = led.charge("q1", ["a"], 0.25); _ = led.charge("q2", ["a", "b"], 0.25)
        >>> [(e.query_id, e.unit) for e in led.audit_log(last=2)]
        [('q2', 'a'), ('q2', 'b')]
        """
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise ValueError(f"last must be an integer >= 0 or None, got {last!r}")
        for qid, unit, cost, at in self._audit_rows(last):
            yield AuditEntry(qid, unit, from_units(cost), at)

    def total_spent(self) -> float:
        """Corpus-level total: the sum of every granted debit over all units."""
        return from_units(self._total_spent())

    def _adopt_budget(self, given: int | None, stored: int, label: str) -> None:
        """Take the store's recorded budget; refuse a ``given`` one that differs."""
        if given is not None and stored != given:
            raise ValueError(
                f"budget_per_unit {from_units(given)!r} differs from the {from_units(stored)!r} "
                f"the {label} was created with (a budget is never reset or enlarged)"
            )
        Ledger.__init__(self, budget_per_unit=from_units(stored))
        self._budget = stored

    def _make_status(self, row: Sequence[Any], bins: list[int]) -> LedgerStatus:
        """A status from a store's row (units, exhausted, queries, last, spent, refusals)."""
        units, exhausted, queries, last, spent, refusals = row
        return LedgerStatus(
            store=self.label,
            name=getattr(self, "name", type(self).__name__),
            budget_per_unit=self.budget_per_unit,
            units=int(units),
            exhausted=int(exhausted),
            total_spent=from_units(int(spent)),
            queries=int(queries),
            refusals=None if refusals is None else int(refusals),
            last_charge=None if last is None else float(last),
            histogram=tuple(bins),
        )

    def status(self, *, min_cost: float = 0.0) -> LedgerStatus:
        """Units charged and exhausted (less than ``min_cost`` left; 0: nothing left),
        the spend histogram, queries, refusals and the last charge, read in one pass.
        """
        need = max(to_units("min_cost", min_cost), 1)
        return self._status(need)

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
    def _charge(self, query_id: str, units: list[str], cost: int) -> tuple[str, list[str]]:
        """Charge atomically: ``("charged", [])``, or ``("refused", lacking units)``.

        If ``query_id`` is already recorded, record nothing: return
        ``("recorded", [])`` when it was recorded with exactly these units and
        this cost, else raise :func:`reused_id`'s error.
        """

    @abstractmethod
    def _claim(self, query_id: str, *, durable: bool) -> bool:
        """Record ``query_id`` atomically: True, or False (nothing new) when it is already
        recorded, claimed or in the audit log. ``durable``: the commit waits for the disk;
        else it is visible at once and durable with the next durable commit."""

    @abstractmethod
    def _settle(self) -> None:
        """Make every commit of the store made so far durable (:meth:`settle`)."""

    @abstractmethod
    def _recorded(self, query_id: str) -> list[tuple[str, int]]:
        """The (unit, cost) audit rows of ``query_id`` (empty when it charged nothing)."""

    @abstractmethod
    def _status(self, min_cost: int) -> LedgerStatus:
        """The status, with units having less than ``min_cost`` left counted as exhausted."""

    @abstractmethod
    def _remaining(self, units: list[str]) -> dict[str, int]:
        """Remaining units for each unit id."""

    @abstractmethod
    def _audit_rows(self, last: int | None = None) -> Iterator[tuple[str, str, int, float]]:
        """(query_id, unit, cost, time) rows, oldest first (the last ``last`` only, if given)."""

    @abstractmethod
    def _total_spent(self) -> int:
        """Sum of all granted costs."""
