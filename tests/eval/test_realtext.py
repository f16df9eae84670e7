"""The real-text track (dprag_core/eval/realtext.py): the allennlp 0.9.0 wheel's QA fixtures.

The wheel is downloaded once with pip (PyPI) into the cache and checked by its sha256;
a wheel with another sha256 is refused before anything is read from it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from dprag_core.eval import realtext


@pytest.fixture(scope="module")
def track() -> realtext.RealTextTrack:
    try:
        return realtext.load()
    except Exception as exc:  # no PyPI here and no cached wheel
        pytest.skip(f"the allennlp wheel cannot be fetched: {type(exc).__name__}")


def test_the_track_holds_every_fixture_question(track: realtext.RealTextTrack) -> None:
    assert Counter(q.dataset for q in track.questions) == {
        "drop": 19,
        "triviaqa": 9,
        "squad": 5,
        "quoref": 4,
    }
    assert len(set(track.ids())) == len(track.records) > 1000
    assert all(0 < len(r.text) <= 600 for r in track.records)


def test_support_counts_the_records_holding_a_gold_answer(
    track: realtext.RealTextTrack,
) -> None:
    by_question = {q.question: q for q in track.questions}
    dench = by_question["Where in England was Dame Judi Dench born?"]
    assert dench.answer == "York" and dench.support > 10  # the England page says York often
    texts = dict(zip(track.ids(), track.texts(), strict=True))
    assert all("york" in texts[i].lower() for i in dench.record_ids)
    pskov = by_question["How many years did the Siege of Pskov last?"]
    assert (pskov.answer, pskov.support) == ("2", 0)  # computed, not copied
    held = [q.support for q in track.questions if q.support]
    assert sorted(held)[len(held) // 2] <= 4  # most answers are held by a few records


def test_a_wheel_with_another_sha256_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "allennlp" / realtext.WHEEL_FILE
    fake.parent.mkdir()
    fake.write_bytes(b"not the wheel")
    with pytest.raises(ValueError, match="sha256 mismatch"):
        realtext.wheel_path(cache=tmp_path)


def test_a_missing_wheel_is_not_fetched_when_told_not_to(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        realtext.wheel_path(cache=tmp_path, download=False)


def test_chunks_stay_within_the_limit() -> None:
    text = "A sentence here. " * 50 + "x" * 1500
    pieces = realtext.chunk(text, chunk_chars=100)
    assert all(len(p) <= 100 for p in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")
    with pytest.raises(ValueError, match="chunk_chars"):
        realtext.chunk(text, chunk_chars=0)
