"""A small real-text track: the QA test fixtures of the ``allennlp==0.9.0`` wheel.

The wheel (Apache-2.0) ships, as test fixtures, a few real passages with their
questions and gold answers: SQuAD (Wikipedia, 5 questions), Quoref (2 passages,
4 questions), DROP (3 passages, 19 questions, most of them counting or
arithmetic) and TriviaQA (9 distinct questions with the Wikipedia and web pages
they were asked about). :func:`load` chunks every passage and page into
records of at most ``chunk_chars`` characters (cut at sentence ends), one
privacy unit each, and keeps each question with its gold answers (TriviaQA:
the answer and its aliases) and the records that contain one of them
(``support``: a DROP answer that must be computed, a count, has none).

Nothing of the fixtures is kept in this repository: :func:`wheel_path` downloads
the wheel once with pip (``pip download allennlp==0.9.0 --no-deps``: PyPI, no
model hub), checks its pinned sha256 and keeps it in ``$DPRAG_CACHE/allennlp``
(default ``~/.cache/dprag/allennlp``); the texts are read from it in memory.
The passages keep their own licences (SQuAD, DROP and the Wikipedia pages:
CC BY-SA; Quoref: CC BY; TriviaQA's question set: Apache-2.0).

Its limits, stated wherever it is reported: a few dozen questions, and the
answer to each is held by few records (often one), which is exactly what a DP
mechanism must not reveal: :attr:`RealQuestion.support` says how many records
could vote for it.

>>> track = load()  # doctest: +SKIP
>>> len(track.questions), track.questions[0].dataset  # doctest: +SKIP
(37, 'squad')
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprag_core.eval.embeddings import file_sha256
from dprag_core.eval.metrics import normalize
from dprag_core.eval.smollm2 import cache_root
from dprag_core.validation import positive_int

__all__ = [
    "WHEEL",
    "WHEEL_SHA256",
    "Passage",
    "RealQuestion",
    "RealTextTrack",
    "chunk",
    "load",
    "wheel_path",
]

WHEEL = "allennlp==0.9.0"
WHEEL_FILE = "allennlp-0.9.0-py3-none-any.whl"
WHEEL_SHA256 = "353752e7b78e48c450e27889d80a3000c4a9af34f70ff9091b3031ad01320940"
_FIXTURES = "allennlp/tests/fixtures/data/"
MAX_ANSWER_CHARS = 100
"""Longer gold answers (a whole passage given as an answer) are left out."""


@dataclass(frozen=True)
class Passage:
    """One record of the track: a chunk of a passage or page (``source``: dataset/title)."""

    id: str
    source: str
    text: str = field(repr=False)


@dataclass(frozen=True)
class RealQuestion:
    """A question, its gold answers, its dataset and the records holding an answer.

    ``answer`` is the first gold answer (what a table prints); a prediction matches
    when it contains any of ``answers``. ``support`` counts ``record_ids``.
    """

    question: str
    answers: tuple[str, ...]
    dataset: str
    record_ids: tuple[str, ...]

    @property
    def answer(self) -> str:
        """The first gold answer."""
        return self.answers[0]

    @property
    def support(self) -> int:
        """How many records contain a gold answer (0: the answer must be computed)."""
        return len(self.record_ids)


@dataclass(frozen=True)
class RealTextTrack:
    """The records and the questions of the track."""

    records: tuple[Passage, ...]
    questions: tuple[RealQuestion, ...]

    def ids(self) -> list[str]:
        """The records' ids, in order."""
        return [r.id for r in self.records]

    def texts(self) -> list[str]:
        """The records' texts, in order."""
        return [r.text for r in self.records]


def wheel_path(*, cache: Path | None = None, download: bool = True) -> Path:
    """The ``allennlp==0.9.0`` wheel, checked by its sha256; downloaded once with pip.

    A wheel in the cache with another sha256 is refused (``ValueError``), never used.
    """
    folder = (cache or cache_root()) / "allennlp"
    path = folder / WHEEL_FILE
    if not path.is_file():
        if not download:
            raise FileNotFoundError(f"{path} is missing: run dprag_core.eval.realtext.load()")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", WHEEL, "--no-deps", "-d", tmp, "-q"],
                check=True,
            )
            shutil.move(str(Path(tmp) / WHEEL_FILE), path)
    actual = file_sha256(path)
    if actual != WHEEL_SHA256:
        raise ValueError(
            f"{path}: sha256 mismatch (expected {WHEEL_SHA256[:8]}..., got {actual[:8]}...): "
            "refusing to read it; delete it to download it again"
        )
    return path


_SENTENCE_END = re.compile(r"(?<=[a-z0-9][.!?])\s+")


def chunk(text: str, *, chunk_chars: int = 600) -> list[str]:
    """``text`` packed into pieces of at most ``chunk_chars`` characters, cut at sentence
    ends (line breaks count as spaces; a sentence longer than that is cut at a space).

    >>> chunk("One. Two.\\n\\nThree is here.", chunk_chars=10)
    ['One. Two.', 'Three is', 'here.']
    """
    limit = positive_int("chunk_chars", chunk_chars)
    out: list[str] = []
    piece = ""
    for sentence in _SENTENCE_END.split(" ".join(text.split())):
        while len(sentence) > limit:
            if piece:
                out.append(piece)
                piece = ""
            cut = sentence.rfind(" ", 0, limit) if " " in sentence[:limit] else limit
            out.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if piece and len(piece) + 1 + len(sentence) > limit:
            out.append(piece)
            piece = ""
        piece = f"{piece} {sentence}".strip()
    if piece:
        out.append(piece)
    return [c for c in out if c]


def _json(wheel: zipfile.ZipFile, name: str) -> Any:
    return json.loads(wheel.read(_FIXTURES + name).decode("utf-8"))


Asked = tuple[str, str, str, list[str], bool]
"""(title, passage, question, gold answers, whether the answer is computed, not copied)."""


def _squad_like(data: Any, dataset: str) -> Iterator[Asked]:
    """The questions of a SQuAD-format file, with their passages."""
    for article in data["data"]:
        for n, paragraph in enumerate(article["paragraphs"]):
            title = f"{dataset}/{article.get('title', dataset)}/{n}"
            for qa in paragraph["qas"]:
                # a gold "answer" of a whole paragraph (one SQuAD fixture has one) is dropped
                texts = [a["text"] for a in qa["answers"] if len(a["text"]) <= MAX_ANSWER_CHARS]
                answers = list(dict.fromkeys(texts))
                yield title, paragraph["context"], qa["question"], answers, False


def _drop(data: Any) -> Iterator[Asked]:
    """DROP's questions: a span answer, or a number computed from the passage."""
    for key, item in data.items():
        for qa in item["qa_pairs"]:
            answer = qa["answer"]
            spans = list(answer.get("spans") or [])
            number = str(answer.get("number") or "")
            yield f"drop/{key}", item["passage"], qa["question"], spans or [number], not spans


def _triviaqa(blob: bytes) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """The evidence pages (title -> text) and the distinct (question, answers)."""
    pages: dict[str, str] = {}
    files: dict[str, Any] = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is None or member.name.split("/")[-1].startswith("."):
                continue
            data = handle.read().decode("utf-8")
            if member.name.startswith("evidence/"):
                pages["triviaqa/" + member.name.split("evidence/", 1)[1]] = data
            elif member.name.endswith(".json"):
                files[member.name] = json.loads(data)
    questions: dict[str, list[str]] = {}
    for name in sorted(files):
        for item in files[name]["Data"]:
            answer = item["Answer"]
            aliases = [answer["Value"], *answer.get("Aliases", [])]
            questions.setdefault(item["Question"], list(dict.fromkeys(aliases)))
    return pages, list(questions.items())


def _holding(answers: Sequence[str], records: Iterable[Passage]) -> tuple[str, ...]:
    """The records containing one of ``answers`` as whole words (normalised): they hold the
    answer's words, not necessarily the fact asked about."""
    wanted = [f" {normalize(a)} " for a in answers if normalize(a)]
    return tuple(r.id for r in records if any(w in f" {normalize(r.text)} " for w in wanted))


def load(*, chunk_chars: int = 600, cache: Path | None = None) -> RealTextTrack:
    """The track (module docstring): records chunked from every passage and page, and the
    questions with their gold answers and supporting records.

    Numeric DROP answers (counts, differences) are computed, not copied, so they
    have no supporting record (a "2" elsewhere in the text does not support it).
    """
    with zipfile.ZipFile(wheel_path(cache=cache)) as wheel:
        items = [
            *_squad_like(_json(wheel, "squad.json"), "squad"),
            *_squad_like(_json(wheel, "quoref/quoref_sample.json"), "quoref"),
            *_drop(_json(wheel, "drop.json")),
        ]
        pages, trivia = _triviaqa(wheel.read(_FIXTURES + "triviaqa-sample.tgz"))
    sources = {title: passage for title, passage, *_ in items}
    sources.update(pages)
    records = tuple(
        Passage(f"{title}#{n}", title, text)
        for title, passage in sources.items()
        for n, text in enumerate(chunk(passage, chunk_chars=chunk_chars))
    )
    asked = [
        (title.split("/")[0], q, answers, computed) for title, _, q, answers, computed in items
    ]
    asked += [("triviaqa", q, answers, False) for q, answers in trivia]
    questions = tuple(
        RealQuestion(q, tuple(answers), dataset, () if computed else _holding(answers, records))
        for dataset, q, answers, computed in asked
    )
    return RealTextTrack(records, questions)
