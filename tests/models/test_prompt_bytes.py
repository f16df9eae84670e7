"""Bytes first: every token engine tokenizes at most ``prompt_bytes(prompt_width)`` of a prompt.

A retrieved document of 1 MB must not make a query tokenize 1 MB (the time, the
memory and transformers' "Token indices sequence length is longer than ..."
warning would all tell that it was retrieved). Every engine that tokenizes prompts
(the eager and static in-process engines, the reader, the server client) cuts a
prompt to its last ``prompt_bytes(prompt_width)`` UTF-8 bytes first; the spy on
the real tokenizer sees every text it is given. Ordinary prompts keep the same
tokens as without the cut (the rest of tests/models pins their outputs).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from server_doubles import ScriptedServer, served

from dprag_core.eval.workbench import reader_path
from dprag_core.models.envelope import keep_last_bytes, prompt_bytes
from dprag_core.models.hf import HFTextModel, HFTokenModel

WIDTH = 48
MEGABYTE = ("Alice Martin, a long record of treatments. " * 25_000)[: 10**6]
PROMPT = f"Context:\n{MEGABYTE}\nAlice Martin was treated with aspirin.\n\nQuestion: who?\nAnswer:"
TEMPLATE_BYTES = 200  # a chat template's own text around the message (public)


def _spy(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> list[int]:
    """The UTF-8 length of every text ``tokenizer.encode`` is asked to tokenize."""
    seen: list[int] = []
    encode = tokenizer.encode

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(text.encode("utf-8")))
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", spy)
    return seen


def _engines(tiny_hf_models: dict[str, Any], tiny_tokenizer: Any) -> dict[str, Any]:
    return {
        "eager": HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, prompt_width=WIDTH),
        "static": HFTokenModel(
            tiny_hf_models["llama"], tiny_tokenizer, engine="static", prompt_width=WIDTH
        ),
        "reader": HFTokenModel.from_pretrained(str(reader_path()), prompt_width=WIDTH),
    }


@pytest.mark.parametrize("engine", ["eager", "static", "reader"])
def test_a_megabyte_document_tokenizes_only_the_public_prefix(
    engine: str,
    tiny_hf_models: dict[str, Any],
    tiny_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _engines(tiny_hf_models, tiny_tokenizer)[engine]
    seen = _spy(monkeypatch, model.tokenizer)
    session = model.prefill([PROMPT, "Question: who?\nAnswer:"])
    session.greedy()
    assert seen, "the spy saw no tokenization"
    assert max(seen) <= prompt_bytes(WIDTH) + TEMPLATE_BYTES < 10**4
    ids = model.prompt_ids(PROMPT)
    assert len(ids) <= prompt_bytes(WIDTH)  # a byte-level tokenizer: at most a token a byte
    # ordinary text: the kept tokens are those the whole prompt would have kept
    assert ids[-WIDTH:] == list(model.tokenizer.encode(PROMPT))[-WIDTH:]


def test_the_text_model_and_the_server_client_cut_bytes_first(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text_model = HFTextModel(tiny_hf_models["gpt2"], tiny_tokenizer, prompt_width=WIDTH)
    server = ScriptedServer(tiny_tokenizer, {"": " aspirin"}, eos=int(tiny_tokenizer.eos_token_id))
    client = served(server, tiny_tokenizer, lookahead_tokens=1, prompt_width=WIDTH)
    seen = _spy(monkeypatch, tiny_tokenizer)
    short = text_model.generate(["Question: who?\nAnswer:"], max_new_tokens=3)
    long = text_model.generate([PROMPT, "Question: who?\nAnswer:"], max_new_tokens=3)
    assert long[1] == short[0]  # a row is a function of its own prompt
    client.generate([PROMPT], max_new_tokens=3)
    assert max(seen) <= prompt_bytes(WIDTH) + TEMPLATE_BYTES
    assert len(server.requests[0]["prompt"][0]) <= WIDTH


def test_the_cut_prompt_is_a_function_of_that_prompt_alone(tiny_tokenizer: Any) -> None:
    """A text whose tokens average more bytes than the bound keeps fewer than WIDTH tokens:
    exactly the tokens of its own last ``prompt_bytes(WIDTH)`` bytes."""
    model = HFTokenModel.from_pretrained(str(reader_path()), prompt_width=WIDTH)
    dense = "Question: " + " " * 10**5 + "who?"  # whitespace runs: long tokens
    ids = model.prompt_ids(dense)
    assert ids == list(model.tokenizer.encode(keep_last_bytes(dense, prompt_bytes(WIDTH))))
    assert model.prompt_ids(dense) == ids  # deterministic


def test_no_length_warning_whatever_the_prompt(
    tiny_hf_models: dict[str, Any], tiny_tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``model_max_length`` below the bytes tokenized, transformers would warn with the
    length (a function of the document); every engine passes ``verbose=False``."""
    model = HFTokenModel(tiny_hf_models["llama"], tiny_tokenizer, prompt_width=WIDTH)
    limit = tiny_tokenizer.model_max_length
    tiny_tokenizer.model_max_length = 64
    try:
        with caplog.at_level(logging.WARNING):
            model.prefill([PROMPT]).greedy()
            model.encode(MEGABYTE[:5000])
        assert not [r for r in caplog.records if "Token indices" in r.getMessage()]
        tiny_tokenizer.encode(MEGABYTE[:5000])  # the control: transformers does warn
        assert [r for r in caplog.records if "Token indices" in r.getMessage()]
    finally:
        tiny_tokenizer.model_max_length = limit


def test_keep_last_bytes_reads_only_the_end_and_agrees_with_encoding_it_all() -> None:
    """The cut encodes only the last ``max_bytes`` characters; the result is the one of
    encoding the whole text (random texts of 1- to 4-byte characters)."""
    import random

    def whole(text: str, max_bytes: int) -> str:
        data = text.encode("utf-8")
        if len(data) <= max_bytes:
            return text
        tail = data[len(data) - max_bytes :]
        while tail and (tail[0] & 0xC0) == 0x80:
            tail = tail[1:]
        return tail.decode("utf-8")

    rng = random.Random(0)
    for _ in range(5000):
        text = "".join(rng.choice("ab é€😀\n") for _ in range(rng.randint(0, 30)))
        limit = rng.randint(1, 40)
        assert keep_last_bytes(text, limit) == whole(text, limit), (text, limit)


@pytest.mark.parametrize("engine", ["eager", "static", "reader"])
def test_every_prompt_costs_the_tokenizer_the_same_bytes(
    engine: str,
    tiny_hf_models: dict[str, Any],
    tiny_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short prompt's row is padded with public filler up to the byte bound, so the
    tokenizer reads as many bytes for it as for a megabyte document's (fails with the
    filler removed: the short prompt's total is then hundreds of bytes lower)."""
    model = _engines(tiny_hf_models, tiny_tokenizer)[engine]
    seen = _spy(monkeypatch, model.tokenizer)
    totals = []
    for prompt in ("Question: who?\nAnswer:", PROMPT[-700:], PROMPT):
        seen.clear()
        model.prompt_ids(prompt)
        totals.append(sum(seen))
    assert len(set(totals)) == 1, totals
    assert totals[0] >= prompt_bytes(WIDTH)
