"""What an error tracker or a callback could reach from an exception: the test-side detector.

:func:`reachable_text` renders ``traceback.TracebackException(exc,
capture_locals=True)`` (what Sentry, rich and IPython show) and walks the
exception's traceback frames, its ``__cause__`` and ``__context__``: every
local of every frame, and a few levels into containers, closures, generator
frames and objects with a ``text`` / ``page_content``. A test asserts that a
secret does not occur in the result.
"""

from __future__ import annotations

import contextlib
import traceback
import types
from typing import Any


def _walk(value: Any, out: list[str], depth: int, seen: set[int]) -> None:
    if depth > 4 or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, str):
        out.append(value)
        return
    with contextlib.suppress(Exception):  # a repr that fails shows nothing
        out.append(repr(value))
    children: list[Any] = []
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    elif isinstance(value, types.FunctionType) and value.__closure__:
        children = [c.cell_contents for c in value.__closure__ if c.cell_contents is not None]
    elif isinstance(value, types.GeneratorType) and value.gi_frame is not None:
        children = list(value.gi_frame.f_locals.values())
    for attr in ("text", "page_content", "args"):
        child = getattr(value, attr, None)
        if isinstance(child, (str, tuple)):
            children.append(child)
    for child in children:
        _walk(child, out, depth + 1, seen)


def reachable_text(exc: BaseException) -> str:
    """Everything reachable from ``exc`` through tracebacks, causes and contexts."""
    out = [
        "".join(
            traceback.TracebackException(
                type(exc), exc, exc.__traceback__, capture_locals=True
            ).format()
        )
    ]
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        out.append(repr(error))
        tb = error.__traceback__
        while tb is not None:
            for value in tb.tb_frame.f_locals.values():
                _walk(value, out, 0, set())
            tb = tb.tb_next
        pending += [error.__cause__, error.__context__]
    return "\n".join(out)
