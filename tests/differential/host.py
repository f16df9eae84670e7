"""What the process hosting dprag sees while a question is asked: the host observers.

A differential cell (tests/differential/entry_points.py) runs every ask inside
:func:`watching`, which records, for that ask, what a hosting process, an
error tracker and a model provider see besides the answer:

- **stdout and stderr at the file-descriptor level**: fds 1 and 2 are
  ``os.dup2``-ed onto temporary files (so a C library's or a Rust tokenizer's
  writes are caught, whatever pytest's own capture does), and ``sys.stdout``
  / ``sys.stderr`` write to the same files;
- **every warning** under the default filters
  (``warnings.catch_warnings(record=True)`` with ``simplefilter("default")``);
- **every log record of every logger at DEBUG**: a handler on the root logger
  (its level DEBUG for the ask) and on every logger that does not propagate
  when the ask starts (transformers' own root among them); a logger's own level and filters are
  respected (a record dropped there is not seen by any host either);
- **the work done in the private section**: every text a transformers
  tokenizer reads (its UTF-8 bytes, the tokens it made) and every forward of a
  transformers model (:class:`Work`), a server double's own (:func:`serving`) left out.

The frames of an exception that reaches the caller or a callback are read by
:func:`frames_of` (every frame's locals, as an error tracker captures them,
through ``__cause__`` and ``__context__``). Everything is normalised
(:func:`observations.normalise`): run ids, addresses, paths and times are tags.

>>> import logging, warnings
>>> seen = Seen()
>>> with watching(seen):
...     print("hello")
...     warnings.warn("careful")
...     logging.getLogger("some.lib").debug("a record")
>>> seen.stdout, seen.warnings[0]["message"], seen.logs[0]["message"]
('hello\\n', 'careful', 'a record')
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from observations import normalise, normalise_text

__all__ = ["HARNESS", "WORK_BOUND_BYTES", "Seen", "Work", "frames_of", "serving", "watching"]

HARNESS = str(Path(__file__).resolve().with_name("entry_points.py"))
"""The runners' file: its frames are the host's own (the caller's), left out of frames."""

WORK_BOUND_BYTES = 16 * 1024
"""A tokenizer input longer than this (UTF-8 bytes) is work that grows with a document:
more than any public prompt width here (at most 1 024 tokens) at 16 bytes a token."""


_SERVING = [0]  # > 0 while a server double computes: the provider's work, not the query's


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """A server double's own computation: its tokenizer calls and forwards are not counted."""
    _SERVING[0] += 1
    try:
        yield
    finally:
        _SERVING[0] -= 1


@dataclasses.dataclass
class Work:
    """The work of one ask: tokenizer calls, tokens made, inputs over the bound, forwards."""

    tokenizer_calls: int = 0
    tokens: int = 0
    bytes_read: int = 0
    over_bound: int = 0  # texts over WORK_BOUND_BYTES given to a tokenizer
    forwards: int = 0  # forward passes of transformers models


@dataclasses.dataclass
class Seen:
    """What the host saw during one ask (module docstring)."""

    stdout: str = ""
    stderr: str = ""
    warnings: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    logs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    work: Work = dataclasses.field(default_factory=Work)


class _Records(logging.Handler):
    def __init__(self, into: list[dict[str, Any]]) -> None:
        super().__init__(level=logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception as error:  # a record whose arguments do not format
            message = f"<unformattable: {type(error).__name__}>"
        entry: dict[str, Any] = {
            "logger": record.name,
            "level": record.levelname,
            "message": normalise_text(message),
        }
        if record.exc_info and record.exc_info[1] is not None:
            entry["exception"] = frames_of(record.exc_info[1])  # an error tracker's capture
        self.into.append(entry)


@contextlib.contextmanager
def _logs(into: list[dict[str, Any]]) -> Iterator[None]:
    handler = _Records(into)
    root = logging.getLogger()
    silent = [
        logger
        for logger in list(logging.root.manager.loggerDict.values())
        if isinstance(logger, logging.Logger) and not logger.propagate
    ]
    level = root.level
    root.setLevel(logging.DEBUG)
    for logger in [root, *silent]:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in [root, *silent]:
            logger.removeHandler(handler)
        root.setLevel(level)


@contextlib.contextmanager
def _fds(seen: Seen) -> Iterator[None]:
    """fds 1 and 2 (and sys.stdout / sys.stderr) onto temporary files for the block."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    streams = (sys.stdout, sys.stderr)
    with contextlib.ExitStack() as files:
        raw = [files.enter_context(tempfile.TemporaryFile()) for _ in range(2)]
        texts = [
            files.enter_context(
                open(f.fileno(), "w", closefd=False, encoding="utf-8", errors="backslashreplace")
            )
            for f in raw
        ]
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(raw[0].fileno(), 1)
            os.dup2(raw[1].fileno(), 2)
            sys.stdout, sys.stderr = texts[0], texts[1]
            yield
        finally:
            for text in texts:
                text.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            out = []
            for f in raw:
                f.seek(0)
                out.append(normalise_text(f.read().decode("utf-8", "backslashreplace")))
            seen.stdout, seen.stderr = out


def _text_bytes(text: Any) -> list[int]:
    if isinstance(text, str):
        return [len(text.encode("utf-8", "surrogatepass"))]
    if isinstance(text, (list, tuple)):
        return [n for t in text for n in _text_bytes(t)]
    return []


def _count_tokens(encoded: Any) -> int:
    ids = encoded.get("input_ids") if hasattr(encoded, "get") else encoded
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return sum(len(row) for row in ids)
    return len(ids) if isinstance(ids, list) else 0


@contextlib.contextmanager
def _work(work: Work) -> Iterator[None]:
    """Count what transformers tokenizers read and make, and model forwards, in the block."""
    import torch
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    original = TokenizersBackend._encode_plus

    def counted(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
        if _SERVING[0]:
            return original(self, text, *args, **kwargs)
        sizes = _text_bytes(text) + _text_bytes(kwargs.get("text_pair"))
        work.tokenizer_calls += 1
        work.bytes_read += sum(sizes)
        work.over_bound += sum(n > WORK_BOUND_BYTES for n in sizes)
        out = original(self, text, *args, **kwargs)
        work.tokens += _count_tokens(out)
        return out

    def forward(module: Any, args: Any, output: Any) -> None:
        if not _SERVING[0]:
            work.forwards += 1

    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: (
            forward(module, args, output)
            if hasattr(module, "config") and hasattr(module, "generation_config")
            else None
        )
    )
    TokenizersBackend._encode_plus = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        TokenizersBackend._encode_plus = original  # type: ignore[method-assign]
        hook.remove()


@contextlib.contextmanager
def watching(seen: Seen) -> Iterator[None]:
    """Record in ``seen`` what the host sees during the block (module docstring)."""
    with contextlib.ExitStack() as stack:
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("default")
        stack.enter_context(_logs(seen.logs))
        stack.enter_context(_work(seen.work))
        stack.enter_context(_fds(seen))
        try:
            yield
        finally:
            seen.warnings = [
                {"category": w.category.__name__, "message": normalise_text(str(w.message)),
                 "where": f"{Path(w.filename).name}:{w.lineno}"}
                for w in caught
            ]  # fmt: skip


CLOCKS = frozenset({"began", "started"})
"""Locals and fields holding a monotonic clock reading at a query's start (the deadline
counts from it): public, and different in every run."""
_CLOCK_FIELD = re.compile(r'"(' + "|".join(sorted(CLOCKS)) + r')": [0-9.eE+-]+')


def _local(value: Any) -> str:
    """A local as an error tracker shows it: its normalised form, short, and a digest of all
    of it (a document anywhere in it changes the digest); clock readings as ``<clock>``."""
    try:
        shown = json.dumps(normalise(value), default=str, sort_keys=True)
    except Exception as error:  # a value that cannot be shown
        shown = f"<unshowable: {type(error).__name__}>"
    shown = _CLOCK_FIELD.sub(r'"\1": "<clock>"', shown)
    digest = hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{shown[:120]}… #{digest}" if len(shown) > 120 else shown


def frames_of(error: BaseException) -> list[dict[str, Any]]:
    """Every frame of ``error``, its causes and contexts (dprag's and libraries', not the
    host's own): the function and the locals an error tracker captures, normalised."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        exc = pending.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_filename != HARNESS:
                out.append({
                    "exception": type(exc).__name__,
                    "function": frame.f_code.co_qualname,
                    "file": Path(frame.f_code.co_filename).name,
                    "locals": {
                        name: "<clock>" if name in CLOCKS else _local(v)
                        for name, v in sorted(frame.f_locals.items())
                    },
                })  # fmt: skip
            tb = tb.tb_next
        pending += [exc.__cause__, exc.__context__]
    return out
