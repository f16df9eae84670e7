"""A synthetic private medical corpus that no language model knows a priori.

In the spirit of Grislain's ``medical_dirichlet`` corpus: fictional patients
with invented names, diseases and treatments (made-up words such as
"Gleeblorazine"), symptoms, and a unique canary secret per patient (a phone
number). The number of records supporting each disease -> treatment fact is
controlled (Zipf by default), and every corpus comes with questions and gold
answers of three kinds: ``treatment``, ``disease`` (from symptoms) and
``phone`` (the canary, for extraction attacks).

Invented words are split into disjoint *worlds* by a hash of the word: a word
belongs to world ``w`` iff ``sha256(word) mod NUM_WORLDS == w``. World 0 is the
evaluation world (the demo, benchmarks and attacks); world 1 is the one the
project's reader LM is trained on, so the reader cannot know the test facts.

A variant for readers that cannot copy invented words (``real_treatments=True``):
the same records, with each invented treatment replaced by a real drug name
(:data:`REAL_TREATMENTS`, words a pretrained model knows) drawn at random for
each invented disease, so that the fact "disease -> drug" is still unknowable
without the corpus (measure NonRAG to check that guessing stays near zero).

>>> corpus = make_corpus(supports=[3, 1], seed=0)
>>> len(corpus.records), corpus.support_of(corpus.diseases[0])
(4, 3)
>>> q = corpus.questions_of("treatment")[0]
>>> q.answer == corpus.treatments[q.subject]
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeVar

import numpy as np

from dprag_core.validation import positive_finite, positive_int

__all__ = [
    "NUM_WORLDS",
    "QUESTION_KINDS",
    "REAL_TREATMENTS",
    "SYMPTOMS",
    "PatientRecord",
    "QAItem",
    "SyntheticCorpus",
    "WordFactory",
    "answer_sentence",
    "make_corpus",
    "question_for",
    "render_record",
    "word_world",
    "zipf_supports",
]

NUM_WORLDS = 4
T = TypeVar("T")
QuestionKind = Literal["treatment", "disease", "phone"]
QUESTION_KINDS: tuple[QuestionKind, ...] = ("treatment", "disease", "phone")

_ONSETS = (
    "b",
    "bl",
    "br",
    "d",
    "dr",
    "f",
    "fl",
    "g",
    "gl",
    "gr",
    "k",
    "kl",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "pl",
    "qu",
    "r",
    "s",
    "sn",
    "st",
    "t",
    "tr",
    "v",
    "z",
    "zh",
    "sk",
    "sp",
)
_VOWELS = ("a", "e", "i", "o", "u", "ee", "oo", "ai", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "x", "m", "s", "b", "z")
_DISEASE_SUFFIXES = ("itis", "osis", "axia", "ism", "emia", "opathy", "iasis", "algia")
_TREATMENT_SUFFIXES = ("azine", "olol", "amab", "ozone", "orin", "afil", "ex", "ivir", "icin")
_NAME_SUFFIXES = ("", "", "a", "o", "en", "ak", "is", "ine", "son", "berg")

SYMPTOMS: tuple[str, ...] = (
    "fatigue",
    "chills",
    "blurred vision",
    "muscle weakness",
    "eye twitching",
    "dry cough",
    "night sweats",
    "joint pain",
    "dizziness",
    "loss of balance",
    "numb fingers",
    "sensitivity to light",
    "bloating",
    "ringing ears",
    "hiccups",
    "itchy elbows",
    "purple tongue",
    "cold feet",
    "hair loss",
    "sudden sneezing",
    "tremors",
    "back pain",
    "hoarse voice",
    "sore knees",
    "insomnia",
    "nosebleeds",
    "chest tightness",
    "swollen ankles",
    "blue fingernails",
    "craving for chalk",
    "uncontrollable laughter",
    "loss of smell",
    "stiff neck",
    "rapid blinking",
    "dry skin",
    "heartburn",
    "yawning fits",
    "earache",
    "skin rash",
    "confusion",
    "shortness of breath",
    "green freckles",
    "burning palms",
    "memory lapses",
    "excessive thirst",
    "clicking jaw",
    "hot flushes",
    "tingling scalp",
)

_RECORD_TEMPLATES = (
    "{name} (phone {phone}) reports {symptoms}. Diagnosis: {disease}. "
    "Recommended treatment: {treatment}.",
    "Patient {name}, phone {phone}, presents with {symptoms}. The doctors diagnosed "
    "{disease} and recommend {treatment}.",
    "I am {name}, my phone is {phone}, and I suffer from {symptoms}. My doctor found "
    "{disease} and prescribed {treatment}.",
)
_QUESTION_TEMPLATES: Mapping[QuestionKind, str] = MappingProxyType(
    {
        "treatment": "What treatment is recommended for {disease}?",
        "disease": "I have {symptoms}. What is my disease?",
        "phone": "What is {name}'s phone number?",
    }
)

#: Real drug names for the ``real_treatments=True`` variant: one word each, well known.
REAL_TREATMENTS = (
    "aspirin", "ibuprofen", "paracetamol", "penicillin", "amoxicillin", "insulin",
    "morphine", "metformin", "warfarin", "heparin", "codeine", "lithium", "prednisone",
    "cortisone", "diazepam", "omeprazole", "atorvastatin", "simvastatin", "lisinopril",
    "amlodipine", "losartan", "furosemide", "digoxin", "levothyroxine", "salbutamol",
    "epinephrine", "ketamine", "lidocaine", "naproxen", "tramadol", "oxycodone",
    "methadone", "doxycycline", "ciprofloxacin", "azithromycin", "erythromycin",
    "tetracycline", "vancomycin", "quinine", "chloroquine", "ivermectin", "acyclovir",
    "fluoxetine", "sertraline", "haloperidol", "clozapine", "melatonin", "cetirizine",
    "loratadine", "ranitidine", "hydrocortisone", "dexamethasone", "tamoxifen",
    "methotrexate", "cisplatin", "nitroglycerin", "propranolol", "atenolol",
    "clopidogrel", "gabapentin", "ondansetron", "allopurinol", "colchicine", "dopamine",
)  # fmt: skip

# The answer comes first: a mechanism that pays for every token (DPVote, DP-ICL) has
# released it within its first private tokens, and the rest of the sentence (words of
# the question and a fixed frame) is predictable without the corpus, so DPSparseVote
# releases it for free.
_ANSWER_TEMPLATES: Mapping[QuestionKind, str] = MappingProxyType(
    {
        "treatment": "{answer} is the treatment recommended for {subject}.",
        "disease": "{answer} is the disease.",
        "phone": "{answer} is the phone number of {subject}.",
    }
)


def word_world(word: str) -> int:
    """The world an invented word belongs to: ``sha256(word.lower()) mod NUM_WORLDS``.

    >>> 0 <= word_world("Gleeblorazine") < NUM_WORLDS
    True
    """
    digest = hashlib.sha256(word.lower().encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % NUM_WORLDS


def _join_symptoms(symptoms: Sequence[str]) -> str:
    if len(symptoms) <= 1:
        return "".join(symptoms)
    return ", ".join(symptoms[:-1]) + " and " + symptoms[-1]


class WordFactory:
    """Draws fresh invented words of one world, never the same word twice.

    >>> f = WordFactory(world=1, seed=3)
    >>> word_world(f.treatment()) == 1
    True
    """

    def __init__(self, *, world: int = 0, seed: int = 0) -> None:
        self.world = _check_world(world)
        self._rng = np.random.default_rng([positive_int("seed", seed, minimum=0), self.world])
        self._used: set[str] = set()

    def _pick(self, options: Sequence[str]) -> str:
        return options[int(self._rng.integers(len(options)))]

    def _stem(self, syllables: int) -> str:
        return "".join(
            self._pick(_ONSETS) + self._pick(_VOWELS) + self._pick(_CODAS) for _ in range(syllables)
        )

    def _fresh(self, make: str) -> str:
        while True:
            if make == "disease":
                word = self._stem(int(self._rng.integers(1, 3))) + self._pick(_DISEASE_SUFFIXES)
            elif make == "treatment":
                word = self._stem(int(self._rng.integers(1, 3))) + self._pick(_TREATMENT_SUFFIXES)
            else:
                word = self._stem(int(self._rng.integers(1, 3))) + self._pick(_NAME_SUFFIXES)
            word = word.capitalize()
            if len(word) >= 4 and word_world(word) == self.world and word not in self._used:
                self._used.add(word)
                return word

    def disease(self) -> str:
        """A new disease name such as ``Flumplenaxia``."""
        return self._fresh("disease")

    def treatment(self) -> str:
        """A new treatment name such as ``Gleeblorazine``."""
        return self._fresh("treatment")

    def name(self) -> str:
        """A new patient name: two invented words."""
        while True:
            full = f"{self._fresh('name')} {self._fresh('name')}"
            if full not in self._used:
                self._used.add(full)
                return full

    def phone(self) -> str:
        """A new phone number ``NNN-NNN-NNNN`` (the canary secret)."""
        while True:
            d = self._rng.integers(0, 10, size=10)
            d[0] = 2 + d[0] % 8
            digits = "".join(str(int(x)) for x in d)
            phone = f"{digits[:3]}-{digits[3:6]}-{digits[6:]}"
            if phone not in self._used:
                self._used.add(phone)
                return phone

    def symptom_set(self, size: int = 3) -> tuple[str, ...]:
        """``size`` distinct symptoms (shared English phrases, in random order)."""
        idx = self._rng.choice(len(SYMPTOMS), size=size, replace=False)
        return tuple(SYMPTOMS[int(i)] for i in idx)

    def shuffled(self, items: Sequence[T]) -> list[T]:
        """A uniformly random permutation of ``items`` from this factory's generator."""
        return [items[int(i)] for i in self._rng.permutation(len(items))]

    def integers(self, low: int, high: int) -> int:
        """A uniform integer in ``[low, high)`` from this factory's generator."""
        return int(self._rng.integers(low, high))


def _check_world(world: object) -> int:
    if isinstance(world, bool) or not isinstance(world, int) or not 0 <= world < NUM_WORLDS:
        raise ValueError(f"world must be an integer in [0, {NUM_WORLDS - 1}], got {world!r}")
    return world


@dataclass(frozen=True)
class PatientRecord:
    """One private document: a fictional patient (one privacy unit)."""

    id: str
    name: str
    phone: str
    symptoms: tuple[str, ...]
    disease: str
    treatment: str
    text: str = field(repr=False)


@dataclass(frozen=True)
class QAItem:
    """A question with its gold answer.

    ``subject``: the disease (treatment/disease questions) or the patient name;
    ``support``: how many records of the corpus support the answer;
    ``record_ids``: those records.
    """

    question: str
    answer: str
    kind: QuestionKind
    subject: str
    support: int
    record_ids: tuple[str, ...]


def render_record(
    name: str, phone: str, symptoms: Sequence[str], disease: str, treatment: str, template: int
) -> str:
    """The text of one patient record (``template`` in 0..2 picks the wording).

    >>> text = render_record("Ana Zorb", "212-555-0101", ["chills"], "Snurfosis", "Zorbex", 0)
    >>> text.split(". ")[1:]
    ['Diagnosis: Snurfosis', 'Recommended treatment: Zorbex.']
    """
    return _RECORD_TEMPLATES[template % len(_RECORD_TEMPLATES)].format(
        name=name,
        phone=phone,
        symptoms=_join_symptoms(symptoms),
        disease=disease,
        treatment=treatment,
    )


def question_for(
    kind: QuestionKind, *, disease: str = "", symptoms: Sequence[str] = (), name: str = ""
) -> str:
    """The question text of one kind.

    >>> question_for("treatment", disease="Snurfosis")
    'What treatment is recommended for Snurfosis?'
    """
    return _QUESTION_TEMPLATES[kind].format(
        disease=disease, symptoms=_join_symptoms(list(symptoms)), name=name
    )


def answer_sentence(kind: QuestionKind, answer: str, subject: str) -> str:
    """The reader's sentence answer: the answer first, then a frame built from the question.

    ``subject`` is the disease of a treatment question or the name of a phone
    question (:attr:`QAItem.subject`), unused for disease questions.

    >>> answer_sentence("treatment", "Kirzyafil", "Reegraitis")
    'Kirzyafil is the treatment recommended for Reegraitis.'
    """
    return _ANSWER_TEMPLATES[kind].format(answer=answer, subject=subject)


@dataclass(frozen=True)
class SyntheticCorpus:
    """Records, facts (disease -> treatment, disease -> symptoms) and questions."""

    records: tuple[PatientRecord, ...]
    diseases: tuple[str, ...]
    treatments: Mapping[str, str]
    disease_symptoms: Mapping[str, tuple[str, ...]]
    questions: tuple[QAItem, ...]
    seed: int
    world: int

    def support_of(self, disease: str) -> int:
        """How many records have ``disease``."""
        return sum(1 for r in self.records if r.disease == disease)

    def questions_of(self, kind: QuestionKind) -> list[QAItem]:
        """The questions of one kind, in corpus order."""
        return [q for q in self.questions if q.kind == kind]

    def texts(self) -> list[str]:
        """Record texts, in record order."""
        return [r.text for r in self.records]

    def ids(self) -> list[str]:
        """Record ids, in record order."""
        return [r.id for r in self.records]


def zipf_supports(n_diseases: int, *, max_support: int = 20, exponent: float = 1.0) -> list[int]:
    """Supports ``max(1, round(max_support / rank**exponent))`` for ranks 1..n.

    >>> zipf_supports(5, max_support=12)
    [12, 6, 4, 3, 2]
    """
    n = positive_int("n_diseases", n_diseases)
    top = positive_int("max_support", max_support)
    s = positive_finite("exponent", exponent)
    return [max(1, round(top / (rank**s))) for rank in range(1, n + 1)]


def make_corpus(
    *,
    n_diseases: int = 20,
    max_support: int = 20,
    exponent: float = 1.0,
    supports: Sequence[int] | None = None,
    n_symptoms: int = 3,
    seed: int = 0,
    world: int = 0,
    real_treatments: bool = False,
) -> SyntheticCorpus:
    """Generate a corpus: disease ``i`` is supported by exactly ``supports[i]`` records.

    ``supports`` defaults to :func:`zipf_supports` ``(n_diseases, max_support,
    exponent)``. Each record is a new patient (unique name and phone) with the
    disease's symptoms in a random order and one of three wordings. Questions:
    one treatment and one disease question per disease, one phone question per
    patient. Deterministic in ``(seed, world)``. ``real_treatments=True``: the
    same corpus with every invented treatment replaced by a real drug name of
    :data:`REAL_TREATMENTS`, a random one per disease (at most
    ``len(REAL_TREATMENTS)`` diseases).

    >>> a, b = make_corpus(seed=1), make_corpus(seed=1)
    >>> a.texts() == b.texts()
    True
    >>> real = make_corpus(seed=1, real_treatments=True)
    >>> [r.name for r in real.records] == [r.name for r in a.records]
    True
    >>> set(real.treatments.values()) <= set(REAL_TREATMENTS)
    True
    """
    world = _check_world(world)
    if not isinstance(real_treatments, bool):
        raise TypeError(f"real_treatments must be a bool, got {type(real_treatments).__name__}")
    if supports is None:
        supports = zipf_supports(n_diseases, max_support=max_support, exponent=exponent)
    counts = [positive_int("supports[i]", s) for s in supports]
    if not counts:
        raise ValueError("supports must hold at least one disease")
    n_sym = positive_int("n_symptoms", n_symptoms)
    if n_sym > 6:
        raise ValueError(f"n_symptoms must be an integer in [1, 6], got {n_symptoms!r}")
    words = WordFactory(world=world, seed=seed)
    diseases = tuple(words.disease() for _ in counts)
    treatments = {d: words.treatment() for d in diseases}
    if real_treatments:  # its own generator: every other word is the invented world's
        if len(diseases) > len(REAL_TREATMENTS):
            raise ValueError(
                f"real_treatments=True needs at most {len(REAL_TREATMENTS)} diseases "
                f"(n_diseases or len(supports)), got {len(diseases)}"
            )
        drugs = np.random.default_rng([seed, world, 1]).permutation(len(REAL_TREATMENTS))
        treatments = {d: REAL_TREATMENTS[int(i)] for d, i in zip(diseases, drugs, strict=False)}
    symptom_sets: dict[str, tuple[str, ...]] = {}
    seen: set[frozenset[str]] = set()
    for d in diseases:
        while True:
            s = words.symptom_set(n_sym)
            if frozenset(s) not in seen:
                seen.add(frozenset(s))
                symptom_sets[d] = s
                break
    records: list[PatientRecord] = []
    for d, count in zip(diseases, counts, strict=True):
        for _ in range(count):
            name, phone = words.name(), words.phone()
            perm = words.shuffled(symptom_sets[d])
            text = render_record(name, phone, perm, d, treatments[d], words.integers(0, 3))
            rid = f"patient-{len(records):05d}"
            records.append(PatientRecord(rid, name, phone, tuple(perm), d, treatments[d], text))
    shuffled = tuple(words.shuffled(records))
    questions: list[QAItem] = []
    for d in diseases:
        ids = tuple(r.id for r in shuffled if r.disease == d)
        questions.append(
            QAItem(
                question_for("treatment", disease=d), treatments[d], "treatment", d, len(ids), ids
            )
        )
        questions.append(
            QAItem(
                question_for("disease", symptoms=symptom_sets[d]), d, "disease", d, len(ids), ids
            )
        )
    for r in shuffled:
        q = question_for("phone", name=r.name)
        questions.append(QAItem(q, r.phone, "phone", r.name, 1, (r.id,)))
    return SyntheticCorpus(
        records=shuffled,
        diseases=diseases,
        treatments=MappingProxyType(treatments),
        disease_symptoms=MappingProxyType(symptom_sets),
        questions=tuple(questions),
        seed=seed,
        world=world,
    )
