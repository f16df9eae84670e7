"""Strict keywords for the adapter's pydantic models: a misspelt field is an error, not ignored.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, model_validator

from dprag_core.validation import check_keywords

__all__ = ["KnownFields"]


class KnownFields(BaseModel):
    """Base for pydantic models that refuse unknown keywords (module docstring)."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            names = {
                name for field, info in cls.model_fields.items() for name in (field, info.alias)
            }
            check_keywords(cls.__name__, map(str, data), {n for n in names if n})
        return data
