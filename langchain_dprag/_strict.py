"""Strict keywords for the adapter's pydantic models: a misspelt field is an error, not ignored.

And no pydantic ``ValidationError`` reaches the user: a constructor's bad value
is a plain ``TypeError`` or ``ValueError`` naming the field, the allowed values
and, where one is known, the fix (the original error of dprag's own checks,
which pydantic wraps, is raised as it was); positional arguments are refused
naming the keywords.

LangChain's ``Runnable`` models ignore unknown keywords, so
``DPRAGChain(..., unit_kye="patient")`` would run with ``unit_key=None``: every
chunk its own privacy unit, a weaker guarantee than configured, silently.
:class:`KnownFields` refuses any keyword that is neither a field nor an alias
with :func:`dprag_core.validation.check_keywords`'s ``TypeError``, which names
the nearest valid one (pydantic lets a ``TypeError`` raised in a validator
through unchanged).

>>> class Box(KnownFields):
...     width: int = 1
>>> Box(widht=2)
Traceback (most recent call last):
...
TypeError: Box got an unknown keyword argument 'widht'; did you mean 'width'?
>>> Box(width="wide")
Traceback (most recent call last):
...
TypeError: Box: width must be a valid integer, unable to parse string as an integer, got str
>>> Box(3)
Traceback (most recent call last):
...
TypeError: Box takes keyword arguments only (width=...), got 1 positional argument
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError, model_validator

from dprag_core.admission import check_accountant
from dprag_core.validation import check_keywords

__all__ = ["KnownFields", "accountant_or_none", "plain_error"]


_TYPE_ERRORS = ("is_instance_of", "is_subclass_of", "_type", "_parsing", "callable_type")


def plain_error(owner: str, invalid: ValidationError) -> Exception:
    """The first error of ``invalid`` as a plain ``TypeError``/``ValueError`` naming the field.

    An exception dprag's own validators raised (pydantic wraps it) is returned
    as it was; pydantic's own checks become ``"<owner>: <field> must be ...,
    got <type>"`` (a value only for a choice among literals: constructor
    arguments, never documents).
    """
    first = invalid.errors()[0]
    original = first.get("ctx", {}).get("error")
    if isinstance(original, Exception):
        return original
    field = ".".join(str(part) for part in first["loc"]) or "input"
    message = str(first["msg"]).replace("Input should be", "must be", 1)
    if not message.startswith("must"):
        message = f"is invalid: {message}"
    kind = str(first["type"])
    value = first.get("input")
    shown = repr(value) if kind in ("literal_error", "enum") else type(value).__name__
    error = TypeError if kind.endswith(_TYPE_ERRORS) else ValueError
    return error(f"{owner}: {field} {message}, got {shown}")


def accountant_or_none(value: Any) -> Any:
    """A field validator (``mode="before"``): None or a ``CorpusAccountant``, else the
    ``TypeError`` that says how to make one (a bare ``Budget`` included)."""
    return None if value is None else check_accountant(value)


class KnownFields(BaseModel):
    """Base for pydantic models that refuse unknown keywords (module docstring)."""

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            names = ", ".join(f"{name}=..." for name in type(self).model_fields)
            plural = "s" if len(args) > 1 else ""
            raise TypeError(
                f"{type(self).__name__} takes keyword arguments only ({names}), "
                f"got {len(args)} positional argument{plural}"
            )
        try:
            super().__init__(**data)
        except ValidationError as invalid:
            raise plain_error(type(self).__name__, invalid) from None

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            names = {
                name for field, info in cls.model_fields.items() for name in (field, info.alias)
            }
            check_keywords(cls.__name__, map(str, data), {n for n in names if n})
        return data
