"""No partial UTF-8 character is ever released, and streaming decoding is bounded per token.

Characters outside a tokenizer's merges are split over several tokens: byte-level
BPE (GPT-2 style, tests/tiny_models.py) gives one token per byte, and a byte
fallback BPE (Llama/Mistral style, built here) gives ``<0xE2>``-like tokens whose
incomplete runs decode as one U+FFFD per byte. For both, and through every path
that decodes tokens (the baselines, VoteRAG/DPVote/DPSparseVote with token and
word units, DP-ICL, MuRAG, the server client's sessions and text generation),
every released chunk and answer is the text of complete characters: a chunk
never ends in a held-back byte, the chunks join to the answer, and an answer cut
inside a character ends before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_token_model import FakeTokenModel
from server_doubles import ScriptedServer, served
from tokenizers import Tokenizer, decoders, models, normalizers
from transformers import PreTrainedTokenizerFast

from dprag_core.accounting.ledger import InMemoryLedger
from dprag_core.algorithms import RAG, DPSparseVote, DPVote, NonRAG, VoteRAG
from dprag_core.algorithms._decoding import CONTEXT, IncrementalDecoder
from dprag_core.algorithms.base import StreamingMechanism
from dprag_core.algorithms.icl import DPICL
from dprag_core.algorithms.murag import MuRAG
from dprag_core.answers import DPAnswer
from dprag_core.models.codec import REPLACEMENT, TokenizerCodec
from dprag_core.retrieval import ScoredDocument

TEXT = "Zoë paid 5€ for 中文 and 😀 in Kraków, then left."


def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    """A BPE with byte fallback (``<0x00>``..``<0xFF>``) over ASCII, Llama's normalizer and
    decoder: every other character is its UTF-8 bytes, one token each."""
    chars = sorted(set("▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.!?:"))
    names = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *chars, "▁p"]
    core = Tokenizer(
        models.BPE(
            vocab={name: i for i, name in enumerate(names)},
            merges=[("▁", "p")],
            unk_token="<unk>",
            byte_fallback=True,
        )
    )
    core.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    core.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module", params=["byte-level", "byte-fallback"])
def codec(request: pytest.FixtureRequest, tiny_tokenizer: Any) -> TokenizerCodec:
    tok = tiny_tokenizer if request.param == "byte-level" else byte_fallback_tokenizer()
    return TokenizerCodec(tok)


def _stream(codec: Any, ids: list[int]) -> tuple[list[str], str]:
    decoder = IncrementalDecoder(codec)
    chunks = [decoder.push(t) for t in ids]
    chunks.append(decoder.flush())
    assert "".join(chunks) == decoder.text
    return chunks, decoder.text


def test_the_tokenizers_split_characters(codec: TokenizerCodec) -> None:
    ids = codec.encode(TEXT)
    assert codec.decode(ids) == TEXT
    alone = [codec.decode([t]) for t in ids]
    assert sum(REPLACEMENT in piece for piece in alone) >= 6  # bytes of € 中 文 😀 ó ë


def test_every_prefix_releases_whole_characters_only(codec: TokenizerCodec) -> None:
    ids = codec.encode(TEXT)
    for cut in range(1, len(ids) + 1):
        chunks, text = _stream(codec, ids[:cut])
        assert not any(c.endswith(REPLACEMENT) for c in chunks)
        assert REPLACEMENT not in text and TEXT.startswith(text)
        assert text == codec.decode_answer(ids[:cut])  # the whole-answer rule, the same
    assert _stream(codec, ids)[1] == TEXT


def test_invalid_bytes_are_cut_wherever_they_are(tiny_tokenizer: Any) -> None:
    codec = TokenizerCodec(tiny_tokenizer)
    lone = codec.encode("€")[0]  # a lead byte alone: invalid once text follows
    ids = [lone, *codec.encode(" ok"), lone, lone, lone, lone, *codec.encode("!")]
    chunks, text = _stream(codec, ids)
    assert codec.decode(ids) == f"{REPLACEMENT} ok{REPLACEMENT * 4}!"  # what decoding shows
    assert text == " ok!" == codec.decode_answer(ids)  # what is released: no U+FFFD
    assert not any(REPLACEMENT in c for c in chunks)


def test_push_decodes_a_bounded_window(codec: TokenizerCodec) -> None:
    """Each push decodes O(1) tokens: the window never exceeds a few tokens of context."""
    widths: list[int] = []

    class Counting:
        def decode(self, ids: list[int]) -> str:
            widths.append(len(ids))
            return codec.decode(ids)

    ids = codec.encode(TEXT * 20)
    decoder = IncrementalDecoder(Counting())
    for t in ids:
        decoder.push(t)
    decoder.flush()
    assert decoder.text == TEXT * 20
    assert max(widths) <= 4 * CONTEXT + 1 and len(widths) <= 2 * len(ids) + 1


# ---------------------------------------------------------------- through the mechanisms

ANSWER = "Zoë €5 中"  # bytes: Z o \xc3\xab ' ' \xe2\x82\xac 5 ' ' \xe4\xb8\xad
DOCS = [ScoredDocument(id=f"d{i}", text="Zoe paid", score=0.9) for i in range(4)]
QUESTION = "Who paid?"
Build = Callable[[Any, int], StreamingMechanism]
LOUD = {"epsilon": 800.0, "delta": 1e-4, "epsilon_token": 40.0}
MECHANISMS: dict[str, Build] = {
    "NonRAG": lambda m, n: NonRAG(m, max_new_tokens=n),
    "RAG": lambda m, n: RAG(m, k=2, max_new_tokens=n),
    "VoteRAG": lambda m, n: VoteRAG(m, m=4, k=1, max_new_tokens=n),
    "VoteRAG-words": lambda m, n: VoteRAG(m, m=4, k=1, max_new_tokens=n, unit="word"),
    "DPVote": lambda m, n: DPVote(m, m=4, k=1, max_new_tokens=n, **LOUD),
    "DPVote-words": lambda m, n: DPVote(m, m=4, k=1, max_new_tokens=n, unit="word", **LOUD),
    "DPSparseVote-LD": lambda m, n: DPSparseVote(m, m=4, k=1, max_new_tokens=n, **LOUD),
    "DPSparseVote-EM": lambda m, n: DPSparseVote(
        m, m=4, k=1, max_new_tokens=n, epsilon=400.0, delta=0.0, epsilon_token=40.0,
        selection="exponential",
    ),
    "DPICL": lambda m, n: DPICL(m, epsilon=200.0, max_new_tokens=n, bounds=(0.0, 1.0), k=4),
    "MuRAG": lambda m, n: MuRAG(
        DPSparseVote(m, m=4, k=1, max_new_tokens=n, epsilon=400.0, delta=0.0,
                     epsilon_token=40.0, selection="exponential"),
        ledger=InMemoryLedger(budget_per_unit=800.0), tau=0.0, epsilon_query=400.0,
    ),
}  # fmt: skip


def _released(mechanism: StreamingMechanism) -> tuple[list[str], DPAnswer]:
    *chunks, answer = mechanism.stream(QUESTION, DOCS, rng=0)
    assert isinstance(answer, DPAnswer) and all(isinstance(c, str) for c in chunks)
    return chunks, answer  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_no_mechanism_releases_part_of_a_character(name: str) -> None:
    """Cut after every byte of the answer: each release is whole characters."""
    full = ANSWER.encode()
    for limit in range(1, len(full) + 2):
        model = FakeTokenModel([("Zoe", ANSWER), ("", ANSWER)])
        chunks, answer = _released(MECHANISMS[name](model, limit))
        assert "".join(chunks) == answer.text
        assert REPLACEMENT not in answer.text, (limit, answer.text)
        expected = full[:limit].decode("utf-8", errors="ignore")
        assert answer.text == expected, (limit, answer.text)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_no_mechanism_releases_an_invalid_byte_mid_answer(name: str) -> None:
    """The demo's ``eln\\ufffd phone number of Rob num``: a lead byte voted mid-answer."""
    answer_bytes = b"eln\xe2 phone \xbf\x80num"  # a lone lead byte, stray continuations
    model = FakeTokenModel([("Zoe", answer_bytes), ("", answer_bytes)])
    chunks, answer = _released(MECHANISMS[name](model, len(answer_bytes)))
    assert "".join(chunks) == answer.text == "eln phone num", answer.text


def test_the_server_client_releases_whole_characters(tiny_tokenizer: Any) -> None:
    script = {"": " 5€ for 中文"}
    server = ScriptedServer(tiny_tokenizer, script, eos=int(tiny_tokenizer.eos_token_id))
    model = served(server, tiny_tokenizer, lookahead_tokens=4)
    ids = tiny_tokenizer.encode(script[""], add_special_tokens=False)
    for limit in range(1, len(ids) + 2):
        chunks, answer = _released(VoteRAG(model, m=4, k=1, max_new_tokens=limit))
        assert "".join(chunks) == answer.text and REPLACEMENT not in answer.text
        assert answer.text == model.decode_answer(ids[:limit])
        prompt = "Context:\nZoe\n\nQuestion: Who?\nAnswer:"
        (text,) = model.generate([prompt], max_new_tokens=limit)
        assert text == answer.text
