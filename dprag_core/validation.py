"""Parameter validation shared by every public constructor.

Each helper raises ``ValueError`` (or ``TypeError`` for the wrong type) with a
message that names the parameter and its allowed range, e.g.
``ValueError("epsilon must be a finite number > 0, got -1")``.

>>> positive_finite("epsilon", 0.5)
0.5
>>> positive_int("m", 3)
3
"""

from __future__ import annotations

import argparse
import difflib
import functools
import inspect
import math
from collections.abc import Callable, Iterable
from numbers import Integral, Real
from typing import Any, TypeVar

__all__ = [
    "StrictKeywords",
    "argument_int",
    "argument_number",
    "check_keywords",
    "finite",
    "in_closed_interval",
    "missing_extra",
    "nonnegative_finite",
    "positive_finite",
    "positive_int",
    "probability",
    "strict_bool",
    "strict_init",
    "strict_keywords",
]

_Init = TypeVar("_Init", bound=Callable[..., None])
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def finite(name: str, value: object) -> float:
    """Return ``value`` as a float, rejecting NaN and infinities."""
    x = _real(name, value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return x


def positive_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is finite and > 0."""
    x = _real(name, value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def nonnegative_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is finite and >= 0."""
    x = _real(name, value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return x


def strict_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool`` (a truthy string or number is refused).

    >>> strict_bool("source_ids", "no")
    Traceback (most recent call last):
    TypeError: source_ids must be True or False, got 'no'
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def probability(name: str, value: object, *, allow_zero: bool = True) -> float:
    """Return ``value`` if it lies in [0, 1) (or (0, 1) with ``allow_zero=False``)."""
    x = _real(name, value)
    low_ok = x >= 0 if allow_zero else x > 0
    if not math.isfinite(x) or not low_ok or x >= 1:
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return x


def in_closed_interval(name: str, value: object, low: float, high: float) -> float:
    """Return ``value`` if it is a finite number in ``[low, high]``."""
    x = _real(name, value)
    if not math.isfinite(x) or not low <= x <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return x


def positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum`` (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def argument_number(meaning: str, accept: Callable[[float], bool]) -> Callable[[str], float]:
    """An ``argparse`` type: a finite number ``accept`` takes, else an error naming ``meaning``.

    >>> share = argument_number("a share in (0, 1]", lambda v: 0 < v <= 1)
    >>> share("0.5")
    0.5
    >>> share("2")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a share in (0, 1], got 2
    >>> share("half")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a share in (0, 1], got half
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan  # not a number: refused below, naming the range
        if not math.isfinite(value) or not accept(value):
            raise argparse.ArgumentTypeError(f"must be {meaning}, got {text}")
        return value

    return parse


def argument_int(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number ``>= minimum``, else an error naming the range.

    >>> count = argument_int(0)
    >>> count("20")
    20
    >>> count("-5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be an integer >= 0, got -5
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1  # not a whole number: refused below, naming the range
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text}")
        return value

    return parse


def check_keywords(owner: str, given: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse a keyword ``owner`` does not take, naming the nearest valid one.

    A misspelt keyword must never be swallowed: ``unit_kye="patient"`` silently
    read as "no unit key" would make each chunk its own privacy unit, a weaker
    guarantee than the one configured.

    >>> check_keywords("DPRetriever", ["k"], ["k", "unit_key"])
    >>> check_keywords("DPRetriever", ["unit_kye"], ["k", "unit_key"])
    Traceback (most recent call last):
    TypeError: DPRetriever got an unknown keyword argument 'unit_kye'; did you mean 'unit_key'?
    >>> check_keywords("Budget", ["total"], ["epsilon", "delta"])
    Traceback (most recent call last):
    TypeError: Budget got an unknown keyword argument 'total'; valid keywords: delta, epsilon
    """
    valid = sorted(set(allowed))
    unknown = [name for name in given if name not in valid]
    if not unknown:
        return
    name = unknown[0]
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}?" if near else f"valid keywords: {', '.join(valid)}"
    raise TypeError(f"{owner} got an unknown keyword argument {name!r}; {hint}")


def strict_init(init: _Init) -> _Init:
    """Wrap an ``__init__`` so that an unknown keyword names the nearest valid one.

    Python's own error ("got an unexpected keyword argument") names no
    alternative; this one does (:func:`check_keywords`). An ``__init__`` that
    takes ``**kwargs`` is returned unchanged (it decides what it accepts).

    >>> class Box:
    ...     @strict_init
    ...     def __init__(self, *, width: int = 1) -> None:
    ...         self.width = width
    >>> Box(widht=2)
    Traceback (most recent call last):
    TypeError: Box got an unknown keyword argument 'widht'; did you mean 'width'?
    """
    return _strict(init, lambda args: type(args[0]).__name__)


def strict_keywords(fn: _Fn) -> _Fn:
    """Wrap a function or method so that an unknown keyword names the nearest valid one.

    Like :func:`strict_init`, for callables other than ``__init__``; the error
    names the function by its qualified name.

    >>> @strict_keywords
    ... def chat(*, chat_mode: str = "condense_question") -> str:
    ...     return chat_mode
    >>> chat(chat_mod="context")
    Traceback (most recent call last):
    TypeError: chat got an unknown keyword argument 'chat_mod'; did you mean 'chat_mode'?
    """
    return _strict(fn, lambda args: fn.__qualname__)


def _strict(fn: _Fn, owner: Callable[[tuple[Any, ...]], str]) -> _Fn:
    """``fn`` checking its keywords (errors name ``owner(args)``); as it is with ``**kwargs``."""
    parameters = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return fn  # it decides what it accepts
    named = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name != "self"
    ]

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            check_keywords(owner(args), kwargs, named)
        return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]


class StrictKeywords:
    """Mixin: every subclass's own ``__init__`` refuses unknown keywords (:func:`strict_init`).

    >>> class Mechanism(StrictKeywords):
    ...     pass
    >>> class Vote(Mechanism):
    ...     def __init__(self, *, epsilon: float) -> None:
    ...         self.epsilon = epsilon
    >>> Vote(epsilom=1.0)
    Traceback (most recent call last):
    TypeError: Vote got an unknown keyword argument 'epsilom'; did you mean 'epsilon'?
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__init__")
        if own is not None and not getattr(own, "__wrapped__", None):
            cls.__init__ = strict_init(own)  # type: ignore[method-assign]


def missing_extra(feature: str, error: ImportError, *, extra: str) -> ModuleNotFoundError:
    """The error for an optional dependency that is not installed: who needs it, and the fix.

    Raise it ``from`` the original ``ImportError``; it is a ``ModuleNotFoundError``
    with the same ``name``, so code that catches that still does.

    >>> missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    >>> print(missing_extra("dprag_core.models.hf", missing, extra="hf"))
    dprag_core.models.hf needs torch, which is not installed: pip install 'dprag[hf]'
    """
    module = (error.name or "a package").split(".")[0]
    return ModuleNotFoundError(
        f"{feature} needs {module}, which is not installed: pip install 'dprag[{extra}]'",
        name=error.name,
    )
