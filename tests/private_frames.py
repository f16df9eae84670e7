"""What an error tracker or a callback could reach from an exception: the test-side detector.

:func:`reachable_text` renders ``traceback.TracebackException(exc,
capture_locals=True)`` (what Sentry, rich and IPython show) and walks the
exception's traceback frames, its ``__cause__`` and ``__context__``: every
local of every frame, recursively into containers, closures, ``functools.partial``
arguments, generator and coroutine frames, dataclass fields, exception
arguments and the attributes that hold a document's text (``text``,
``page_content``, ``node``, ``document``...), each value's ``repr`` included.
A test asserts that a secret does not occur in the result (:func:`assert_sealed`).
The frame that caught the exception (the test's own) is not walked.

``allowed``: objects the caller passed in itself (a postprocessor's input
nodes), skipped by identity wherever they occur: they are the caller's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import traceback
import types
from collections.abc import Iterable
from typing import Any

_TEXT_ATTRIBUTES = (
    "text",
    "page_content",
    "args",
    "node",
    "nodes",
    "document",
    "documents",
    "source_nodes",
    "metadata",
    "content",
)
_DEPTH = 8


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, inspect.BoundArguments):
        return list(value.arguments.values())
    children: list[Any] = []
    if isinstance(value, types.FunctionType) and value.__closure__:
        for cell in value.__closure__:
            with contextlib.suppress(ValueError):  # an empty cell
                children.append(cell.cell_contents)
    if isinstance(value, types.MethodType):
        children.append(value.__func__)
    if isinstance(value, functools.partial):
        children += [value.func, *value.args, *value.keywords.values()]
    frame = getattr(value, "gi_frame", None) or getattr(value, "cr_frame", None)
    if isinstance(frame, types.FrameType):
        children += list(frame.f_locals.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        children += [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    for attr in _TEXT_ATTRIBUTES:
        with contextlib.suppress(Exception):
            child = getattr(value, attr, None)
            if child is not None and not callable(child):
                children.append(child)
    return children


def _walk(value: Any, out: list[str], depth: int, seen: set[int]) -> None:
    if depth > _DEPTH or id(value) in seen or value is None:
        return
    seen.add(id(value))
    if isinstance(value, (str, bytes)):
        out.append(value if isinstance(value, str) else value.decode("utf-8", "replace"))
        return
    if isinstance(value, (int, float, bool, type, types.ModuleType)):
        return
    if not isinstance(value, (dict, list, tuple, set, frozenset, inspect.BoundArguments)):
        with contextlib.suppress(Exception):  # a repr that fails shows nothing
            out.append(repr(value))  # (a container's repr is its items': walked below)
    for child in _children(value):
        _walk(child, out, depth + 1, seen)


def _errors(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or any(error is e for e in found):
            continue
        found.append(error)
        pending += [error.__cause__, error.__context__]
    return found


def frames_of(exc: BaseException) -> list[types.FrameType]:
    """Every frame of ``exc``'s traceback and of its causes' and contexts' tracebacks,
    but the first of ``exc``'s own: the frame that caught it (the caller's, the test's)."""
    frames = []
    for error in _errors(exc):
        tb = error.__traceback__
        if error is exc and tb is not None:
            tb = tb.tb_next
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
    return frames


def reachable_text(exc: BaseException, *, allowed: Iterable[object] = ()) -> str:
    """Everything reachable from ``exc`` through tracebacks, causes and contexts."""
    seen: set[int] = {id(a) for a in allowed}
    out = []
    if not seen:  # the rendered locals show the allowed objects' reprs too
        out.append(
            "".join(
                traceback.TracebackException(
                    type(exc),
                    exc,
                    exc.__traceback__ and exc.__traceback__.tb_next,
                    capture_locals=True,
                ).format()
            )
        )
    for error in _errors(exc):
        out.append(repr(error))
        for arg in error.args:
            _walk(arg, out, 0, seen)
    for frame in frames_of(exc):
        for value in frame.f_locals.values():
            _walk(value, out, 0, seen)
    return "\n".join(out)


def assert_sealed(
    exc: BaseException, secrets: Iterable[str], *, allowed: Iterable[object] = ()
) -> None:
    """Fail naming the first secret reachable from ``exc`` (:func:`reachable_text`)."""
    seen = reachable_text(exc, allowed=allowed)
    leaked = [s for s in secrets if s in seen]
    assert not leaked, f"{type(exc).__name__} reaches private text {leaked[:3]}"
