"""Nothing a private section logs, warns or prints is shown (dprag_core.quiet_logs).

Reproduced with a real part: transformers' "Token indices sequence length is longer than the
specified maximum sequence length" for a long document read by a tokenizer whose
``model_max_length`` is set, first shown outside a private section (the positive control),
then not from inside one (the stores' warnings: tests/langchain/test_lc_quiet.py,
tests/llamaindex/test_li_quiet.py). A warning dropped inside leaves the warnings registry as
it was (a later public warning from the same line still shows, once); a private section in
one thread does not quiet another thread.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from tiny_models import build_tokenizer
from toy_mechanisms import ToyMechanism

from dprag_core import InMemoryCorpusAccountant, PrivateRAG
from dprag_core.answers import DPAnswer
from dprag_core.budget import Budget
from dprag_core.mechanisms.rng import RngLike
from dprag_core.quiet_logs import muted_logs
from dprag_core.retrieval.capabilities import HonoursK
from dprag_core.retrieval.documents import ScoredDocument

LONG = "a long private record " * 200
LENGTH_WARNING = "Token indices sequence length is longer than"


def _noisy(tag: str) -> None:
    """One warning (always from this line), one log record of a new logger, one print."""
    warnings.warn(f"warned {tag}", RuntimeWarning, stacklevel=1)
    logging.getLogger(f"some.library.{tag}").warning("logged %s", tag)
    print(f"printed {tag}")
    sys.stderr.write(f"stderr {tag}\n")


def test_logs_warnings_and_prints_inside_are_dropped(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        with muted_logs():
            _noisy("inside")
        _noisy("outside")  # the positive control: every channel shows it
    out, err = capsys.readouterr()
    assert [str(w.message) for w in seen] == ["warned outside"]
    assert [r.getMessage() for r in caplog.records] == ["logged outside"]
    assert "inside" not in out + err and "printed outside" in out and "stderr outside" in err


def test_a_warning_dropped_inside_does_not_use_up_the_registry() -> None:
    def warn_here() -> None:
        warnings.warn("once per line", UserWarning, stacklevel=1)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # once per location: the registry decides
        with muted_logs():
            warn_here()
        warn_here()  # shown: the dropped one did not count
        warn_here()  # not shown: the registry works (so this test can fail)
    assert [str(w.message) for w in seen] == ["once per line"]


def test_a_quiet_thread_does_not_quiet_another(caplog: pytest.LogCaptureFixture) -> None:
    inside, done = threading.Event(), threading.Event()

    def private() -> None:
        with muted_logs():
            inside.set()
            done.wait(10)
            logging.getLogger("worker").warning("private record")

    worker = threading.Thread(target=private)
    with caplog.at_level(logging.INFO):
        worker.start()
        inside.wait(10)
        logging.getLogger("other").warning("public record")
        done.set()
        worker.join(10)
    assert [r.getMessage() for r in caplog.records] == ["public record"]


class Tokenizing(ToyMechanism):
    """Tokenizes its documents with a real tokenizer (as a token engine does)."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(k=2)
        self.tokenizer = tokenizer

    def answer(
        self, question: str, docs: Sequence[ScoredDocument], *, rng: RngLike = None
    ) -> DPAnswer:
        for doc in docs:
            self.tokenizer(doc.text)
        return super().answer(question, docs, rng=rng)


def test_transformers_length_warning_stays_inside(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    control = build_tokenizer()
    control.model_max_length = 16
    with caplog.at_level(logging.WARNING):
        control(LONG)  # outside: transformers warns (the positive control)
    assert LENGTH_WARNING in caplog.text + "".join(capfd.readouterr())
    caplog.clear()

    @HonoursK
    def retriever(question: str, k: int) -> list[ScoredDocument]:
        return [ScoredDocument("x", LONG, 0.9)]

    tokenizer = build_tokenizer()
    tokenizer.model_max_length = 16
    app = PrivateRAG(
        Tokenizing(tokenizer), retriever, accountant=InMemoryCorpusAccountant(Budget(5.0, 1e-3))
    )
    with caplog.at_level(logging.DEBUG):
        app.answer("Who?")
        list(app.stream("Who?"))
    assert LENGTH_WARNING not in caplog.text + "".join(capfd.readouterr())
