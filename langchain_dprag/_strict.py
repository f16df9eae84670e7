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
TypeError: Box: width must be a valid integer, got str
>>> class Choice(KnownFields):
...     flag: bool | int = False
>>> Choice(flag="many")
Traceback (most recent call last):
...
TypeError: Choice: flag must be a valid boolean or a valid integer, got str
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
    got <type>"`` (a value only for a wrong choice among literals, and only a
    short string or a number: never an object that could hold documents); a
    missing field is a ``TypeError`` naming it.

    >>> from pydantic import BaseModel, ValidationError
    >>> class Size(BaseModel):
    ...     width: int
    >>> try:
    ...     Size(width="a record's text")
    ... except ValidationError as invalid:
    ...     print(plain_error("Size", invalid))
    Size: width must be a valid integer, got str
    """
    errors = invalid.errors()
    first = errors[0]
    original = first.get("ctx", {}).get("error")
    if isinstance(original, Exception):
        return original
    field = str(first["loc"][0]) if first["loc"] else "input"
    kind = str(first["type"])
    if kind == "missing":
        return TypeError(f"{owner} needs {field}=..., a required keyword argument")
    same = [e for e in errors if e["loc"][:1] == first["loc"][:1]]  # a union's branches
    wanted = " or ".join(dict.fromkeys(_wanted(str(e["msg"])) for e in same))
    value = first.get("input")
    shown = _shown(value) if kind in ("literal_error", "enum") else type(value).__name__
    error = TypeError if all(str(e["type"]).endswith(_TYPE_ERRORS) for e in same) else ValueError
    return error(f"{owner}: {field} must be {wanted}, got {shown}")


def _shown(value: object) -> str:
    """A wrong choice as it is shown: a short string or a number as itself, else its type only.

    Anything else (an object passed by mistake, a long text) may hold documents,
    so only its type is named.

    >>> _shown("txt"), _shown(3), _shown("x" * 100), _shown(["a record"])
    ("'txt'", '3', 'str', 'list')
    """
    if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 32):
        return repr(value)
    return type(value).__name__


def _wanted(message: str) -> str:
    """What a pydantic message asks for: ``"Input should be a valid integer"`` -> ``"a valid
    integer"``."""
    for start in ("Input should be ", "Value should be "):
        if message.startswith(start):
            return message[len(start) :].split(", unable to")[0]
    return f"valid ({message})"


def accountant_or_none(value: Any) -> Any:
    """A field validator (``mode="before"``): None or a ``CorpusAccountant``, else the
    ``TypeError`` that says how to make one (a bare ``Budget`` included).

    >>> from dprag_core import Budget
    >>> accountant_or_none(None) is None
    True
    >>> accountant_or_none(Budget(1.0))
    Traceback (most recent call last):
    ...
    TypeError: accountant must be a CorpusAccountant, got Budget...
    """
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
