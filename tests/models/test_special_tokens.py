"""One end-of-sequence policy: the in-process engine and the server client stop on the same ids.

For a chat checkpoint whose generation config lists ``<eos>`` and ``<|im_end|>``
(tests/chat_checkpoint.py, greedy chain `` aspirin<|im_end|>`` after every
chat prompt), :class:`HFTokenModel` and :class:`OpenAICompatModel` (against a server
that ends each row with ``<|im_end|>``) resolve the same set with
:func:`~dprag_core.models.codec.special_tokens` and stop VoteRAG after two tokens,
the server with ONE request. The set is read from the tokenizer, the configs and
the chat template's end of turn; ``eos_token_ids=`` replaces it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from chat_checkpoint import chat_checkpoint
from server_doubles import ModelServer, served

from dprag_core.algorithms import VoteRAG
from dprag_core.algorithms._words import WordSplitter
from dprag_core.answers import DPAnswer
from dprag_core.models.codec import end_of_turn, special_tokens, word_starts
from dprag_core.models.hf import HFTokenModel
from dprag_core.models.openai_compat import OpenAICompatModel
from dprag_core.retrieval import ScoredDocument
from dprag_core.stop_reasons import EOS, MAX_TOKENS

DOCS = [ScoredDocument(id=f"d{i}", text="Alice takes aspirin.", score=0.9) for i in range(3)]


@pytest.fixture(scope="module")
def checkpoint() -> tuple[Any, Any, list[int]]:
    return chat_checkpoint()


def _vote(model: Any) -> DPAnswer:
    return VoteRAG(model, m=3, k=1, max_new_tokens=12).answer("What does Alice take?", DOCS, rng=0)


def test_both_models_stop_on_im_end(checkpoint: tuple[Any, Any, list[int]]) -> None:
    tokenizer, model, chain = checkpoint
    *answer, im_end = chain
    local = HFTokenModel(model, tokenizer)
    server = ModelServer(model, eos=im_end)  # llama.cpp ends a row at any end-of-generation id
    remote = served(server, tokenizer, lookahead_tokens=8, configs=[model.generation_config])
    assert local.eos_token_ids == remote.eos_token_ids == {tokenizer.eos_token_id, im_end}
    here, there = _vote(local), _vote(remote)
    assert here.details["stop_reason"] == there.details["stop_reason"] == EOS
    assert here.details["tokens_generated"] == there.details["tokens_generated"] == len(answer)
    assert here.text == there.text == " aspirin"
    assert len(server.requests) == 3  # one fill (a request per voter), not one per token
    # a client and a server that both ignore the end of turn run to the length limit
    blind_server = ModelServer(model, eos=tokenizer.eos_token_id)
    blind = served(blind_server, tokenizer, lookahead_tokens=8, eos_token_ids=[blind_server.eos])
    assert _vote(blind).details["stop_reason"] == MAX_TOKENS
    assert len(blind_server.requests) > 1


def test_the_set_is_read_from_each_source(checkpoint: tuple[Any, Any, list[int]]) -> None:
    tokenizer, model, chain = checkpoint
    eos, im_end = tokenizer.eos_token_id, chain[-1]
    plain, _, _ = chat_checkpoint(chat=False)
    assert end_of_turn(tokenizer) == im_end and end_of_turn(plain) is None
    assert special_tokens(tokenizer).eos_token_ids == {eos, im_end}  # the chat template
    assert special_tokens(plain).eos_token_ids == {eos}  # the tokenizer alone
    generation = model.generation_config
    assert special_tokens(plain, configs=[generation]).eos_token_ids == {eos, im_end}
    override = special_tokens(tokenizer, configs=[generation], eos_token_ids=[im_end])
    assert override.eos_token_ids == {im_end} and override.pad_token_id == tokenizer.pad_token_id
    padded = special_tokens(tokenizer, logit_rows=len(tokenizer) + 7)
    assert padded.vocab_size == len(tokenizer)
    assert special_tokens(tokenizer, logit_rows=100).vocab_size == 100


def test_from_pretrained_reads_the_configs_beside_the_tokenizer(
    checkpoint: tuple[Any, Any, list[int]], tmp_path: Path
) -> None:
    _, model, chain = checkpoint
    im_end = chain[-1]
    plain, _, _ = chat_checkpoint(chat=False)  # no chat template: only the configs say im_end
    model.save_pretrained(tmp_path)
    plain.save_pretrained(tmp_path)
    local = HFTokenModel.from_pretrained(str(tmp_path))
    remote = OpenAICompatModel.from_pretrained(
        "http://server.test/v1",
        str(tmp_path),
        model="m",
        check_tokenizer=False,
        transport=httpx.MockTransport(ModelServer(model, eos=im_end)),
    )
    assert local.eos_token_ids == remote.eos_token_ids == {plain.eos_token_id, im_end}


@pytest.mark.parametrize(
    "bad", [[], [-1], [10**9], ["a"], [True]], ids=["empty", "neg", "huge", "str", "bool"]
)
def test_bad_overrides_are_refused_by_both_models(
    checkpoint: tuple[Any, Any, list[int]], bad: list[Any]
) -> None:
    tokenizer, model, _ = checkpoint
    with pytest.raises(ValueError, match="eos_token_ids must be token ids"):
        HFTokenModel(model, tokenizer, eos_token_ids=bad)
    with pytest.raises(ValueError, match="eos_token_ids must be token ids"):
        served(ModelServer(model, eos=0), tokenizer, lookahead_tokens=1, eos_token_ids=bad)


def test_a_checkpoint_without_any_end_id(checkpoint: tuple[Any, Any, list[int]]) -> None:
    """In process it stops at its length limit only; the server client refuses it."""
    _, model, _ = checkpoint
    plain, _, _ = chat_checkpoint(chat=False)
    plain.eos_token = None
    assert special_tokens(plain).eos_token_ids == frozenset()
    assert special_tokens(plain).pad_token_id == plain.pad_token_id
    with pytest.raises(ValueError, match="eos_token_ids must be given"):
        served(ModelServer(model, eos=0), plain, lookahead_tokens=1)


def test_the_word_table_comes_from_the_codec(checkpoint: tuple[Any, Any, list[int]]) -> None:
    """One table per model, shared by every word-level mechanism built on it."""
    tokenizer, model, chain = checkpoint
    local = HFTokenModel(model, tokenizer)
    table = word_starts(local)
    assert table is word_starts(local) and table.shape == (local.vocab_size,)
    assert table[chain[-1]] and table[chain[0]] and not table[tokenizer.encode("pirin")[0]]
    assert WordSplitter(local, max_tokens=4)._starts is table
