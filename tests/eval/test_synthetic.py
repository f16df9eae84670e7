"""The synthetic private corpus: determinism, controlled support, disjoint worlds."""

from __future__ import annotations

import pytest

from dprag_core.eval.synthetic import (
    NUM_WORLDS,
    REAL_TREATMENTS,
    WordFactory,
    make_corpus,
    word_world,
    zipf_supports,
)


def test_same_seed_same_corpus_other_seed_other_corpus() -> None:
    a, b, c = make_corpus(seed=3), make_corpus(seed=3), make_corpus(seed=4)
    assert a.texts() == b.texts()
    assert a.questions == b.questions
    assert a.texts() != c.texts()


def test_support_counts_are_exactly_controlled() -> None:
    supports = [7, 1, 4, 2]
    corpus = make_corpus(supports=supports, seed=1)
    assert [corpus.support_of(d) for d in corpus.diseases] == supports
    assert len(corpus.records) == sum(supports)
    for q in corpus.questions_of("treatment"):
        assert q.support == corpus.support_of(q.subject)
        assert len(q.record_ids) == q.support
        records = {r.id: r for r in corpus.records}
        assert all(records[i].treatment == q.answer for i in q.record_ids)


def test_zipf_supports_default_corpus() -> None:
    assert zipf_supports(4, max_support=20, exponent=1.0) == [20, 10, 7, 5]
    corpus = make_corpus(n_diseases=4, max_support=20, seed=0)
    assert sorted((corpus.support_of(d) for d in corpus.diseases), reverse=True) == [20, 10, 7, 5]


def test_records_and_questions_are_consistent() -> None:
    corpus = make_corpus(seed=2)
    phones = [r.phone for r in corpus.records]
    names = [r.name for r in corpus.records]
    assert len(set(phones)) == len(phones)
    assert len(set(names)) == len(names)
    for r in corpus.records:
        for field in (r.name, r.phone, r.disease, r.treatment, *r.symptoms):
            assert field in r.text
        assert corpus.treatments[r.disease] == r.treatment
        assert set(r.symptoms) == set(corpus.disease_symptoms[r.disease])
    kinds = {q.kind for q in corpus.questions}
    assert kinds == {"treatment", "disease", "phone"}
    for q in corpus.questions_of("phone"):
        (rid,) = q.record_ids
        assert next(r for r in corpus.records if r.id == rid).phone == q.answer
        assert q.subject in q.question
    for q in corpus.questions_of("disease"):
        assert all(s in q.question for s in corpus.disease_symptoms[q.answer])
        assert q.answer not in q.question
    assert len({frozenset(s) for s in corpus.disease_symptoms.values()}) == len(corpus.diseases)


def test_train_and_test_worlds_are_disjoint() -> None:
    test = make_corpus(n_diseases=40, seed=0, world=0)
    train = make_corpus(n_diseases=40, seed=0, world=1)
    for corpus, world in ((test, 0), (train, 1)):
        for r in corpus.records:
            assert word_world(r.disease) == world
            assert word_world(r.treatment) == world
            assert all(word_world(part) == world for part in r.name.split())

    def vocab(c: object) -> set[str]:
        out: set[str] = set()
        for r in c.records:  # type: ignore[attr-defined]
            out |= {r.disease, r.treatment, *r.name.split()}
        return out

    assert not vocab(test) & vocab(train)


def test_word_factory_never_repeats_and_stays_in_its_world() -> None:
    f = WordFactory(world=2, seed=0)
    words = [f.treatment() for _ in range(300)] + [f.disease() for _ in range(300)]
    assert len(set(words)) == len(words)
    assert {word_world(w) for w in words} == {2}


@pytest.mark.parametrize("world", [-1, NUM_WORLDS, 1.0, True])
def test_bad_world_is_refused(world: object) -> None:
    with pytest.raises(ValueError, match="world must be an integer"):
        make_corpus(world=world)  # type: ignore[arg-type]


def test_bad_supports_are_refused() -> None:
    with pytest.raises(ValueError, match="supports"):
        make_corpus(supports=[3, 0])
    with pytest.raises(ValueError, match="at least one"):
        make_corpus(supports=[])
    with pytest.raises(ValueError, match="exponent"):
        make_corpus(exponent=-1.0)


def test_real_treatments_change_only_the_treatment_names() -> None:
    invented = make_corpus(n_diseases=40, max_support=100, seed=0)
    real = make_corpus(n_diseases=40, max_support=100, seed=0, real_treatments=True)
    assert set(real.treatments.values()) <= set(REAL_TREATMENTS)
    assert len(set(real.treatments.values())) == len(real.diseases)  # one drug per disease
    assert real.diseases == invented.diseases
    for a, b in zip(invented.records, real.records, strict=True):
        assert (a.id, a.name, a.phone, a.disease) == (b.id, b.name, b.phone, b.disease)
        assert b.treatment == real.treatments[b.disease]
        assert a.text.replace(a.treatment, b.treatment) == b.text
    asked = {q.subject: q.answer for q in real.questions_of("treatment")}
    assert asked == dict(real.treatments)
    other = make_corpus(n_diseases=40, max_support=100, seed=1, real_treatments=True)
    assert list(other.treatments.values()) != list(real.treatments.values())


def test_real_treatments_refuse_more_diseases_than_drug_names() -> None:
    with pytest.raises(ValueError, match=r"at most \d+ diseases \(n_diseases"):
        make_corpus(n_diseases=len(REAL_TREATMENTS) + 1, real_treatments=True)
    with pytest.raises(TypeError, match="real_treatments must be a bool"):
        make_corpus(real_treatments=1)  # type: ignore[arg-type]
