"""Exact amounts and checked names for every budget store: integers, ids, tables, names.

Epsilon is stored in integer pico-epsilon (1e-12) units and delta in integer
atto-delta (1e-18) units, each amount rounded to the nearest integer, so that
100 charges of 0.1 fit exactly in 10.0 and an audit log replays exactly.
Amounts are limited to :data:`MAX_EPSILON` so that the integers fit in 64 bits.

>>> to_units("cost", 0.1), budget_units("total", Budget(0.1, 1e-6))
(100000000000, (100000000000, 1000000000000))
"""

from __future__ import annotations

import re

from dprag_core.budget import Budget
from dprag_core.validation import nonnegative_finite, positive_finite, strict_bool

__all__ = [
    "DELTA_SCALE",
    "MAX_EPSILON",
    "MAX_ID_BYTES",
    "SCALE",
    "budget_units",
    "check_id",
    "check_name",
    "check_table",
    "from_units",
    "open_options",
    "to_units",
]

SCALE = 10**12
"""Integer units per epsilon (pico-epsilon)."""

DELTA_SCALE = 10**18
"""Integer units per delta (atto-delta)."""

MAX_EPSILON = 1e6
"""Largest budget or cost a store accepts (keeps integers well inside 64 bits)."""

MAX_ID_BYTES = 1024
"""Longest unit or query id, in UTF-8 bytes, that every backend accepts."""

_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def to_units(name: str, value: object, *, positive: bool = False) -> int:
    """Validate an epsilon amount and convert it to integer pico-epsilon units.

    >>> to_units("cost", -1)
    Traceback (most recent call last):
    ...
    ValueError: cost must be a finite number >= 0, got -1
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


def budget_units(name: str, budget: Budget) -> tuple[int, int]:
    """(epsilon, delta) of ``budget`` as integers; a ValueError names ``name`` when out of range.

    >>> budget_units("cost", Budget(1e-20))
    Traceback (most recent call last):
    ...
    ValueError: cost.epsilon must be at least 1e-12, got 1e-20
    """
    if budget.epsilon > MAX_EPSILON:
        raise ValueError(f"{name}.epsilon must be at most {MAX_EPSILON:g}, got {budget.epsilon!r}")
    eps, delta = round(budget.epsilon * SCALE), round(budget.delta * DELTA_SCALE)
    if eps == 0:
        raise ValueError(f"{name}.epsilon must be at least 1e-12, got {budget.epsilon!r}")
    if delta == 0 and budget.delta > 0:
        raise ValueError(f"{name}.delta must be 0 or at least 1e-18, got {budget.delta!r}")
    return eps, delta


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
    if not value or value.isspace():  # str.isspace: the whitespace of a pattern's \s
        raise ValueError(f"{name} must be a non-empty string (not only whitespace)")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character")
    if value.isascii():  # one byte a character (a charge checks every unit: the common case)
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(f"{name} must be valid UTF-8 text (no lone surrogates)") from None
    if size > MAX_ID_BYTES:
        raise ValueError(f"{name} must be at most {MAX_ID_BYTES} UTF-8 bytes, got {size}")
    return value


def check_table(table: object, name: str = "table") -> str:
    """A table-name prefix (or role name): a lowercase SQL identifier of at most 41 characters.

    >>> check_table("dprag_ledger")
    'dprag_ledger'
    >>> check_table("Bad-Name")
    Traceback (most recent call last):
    ...
    ValueError: table must match [a-z_][a-z0-9_]{0,40}, got 'Bad-Name'
    """
    if not isinstance(table, str) or not _TABLE.fullmatch(table):
        raise ValueError(f"{name} must match [a-z_][a-z0-9_]{{0,40}}, got {table!r}")
    return table


def open_options(
    *, name: object, create: object, read_only: object = False, needs: str | None = None
) -> tuple[str | None, bool, bool]:
    """Checked (name, create, read_only) of a store's constructor.

    ``needs``: the parameter that creating requires and the caller left out
    (a ``ValueError`` when ``create``).

    >>> open_options(name=None, create=True, needs="total")
    Traceback (most recent call last):
    ...
    ValueError: total is needed to create a store (create=True)
    """
    checked = None if name is None else check_name(name)
    create, read_only = strict_bool("create", create), strict_bool("read_only", read_only)
    if create and needs is not None:
        raise ValueError(f"{needs} is needed to create a store (create=True)")
    return checked, create, read_only


def check_name(value: object) -> str:
    """A store's identity (``name``): 1-64 letters, digits, ``.``, ``_`` or ``-``.

    >>> check_name("patients-2024")
    'patients-2024'
    >>> check_name("")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: name must be 1-64 characters of letters, digits, '.', '_' or '-' ..., got ''
    """
    if not isinstance(value, str):
        raise TypeError(f"name must be a string, got {type(value).__name__}")
    if not _NAME.fullmatch(value):
        raise ValueError(
            "name must be 1-64 characters of letters, digits, '.', '_' or '-' (starting with "
            f"a letter or digit), got {value!r}"
        )
    return value
