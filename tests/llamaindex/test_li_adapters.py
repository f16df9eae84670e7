"""LlamaIndexTextModel, node -> document conversion, the cosine FAISS store, doctests."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import math
from typing import Any

import numpy as np
import pytest
from li_helpers import QuestionLLM
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import CustomLLM, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from dprag_core.models.base import TextModel
from llamaindex_dprag import LlamaIndexTextModel, cosine_faiss_store
from llamaindex_dprag.units import node_unit, normalise_score, to_scored_documents

MODULES = [
    "llamaindex_dprag",
    "llamaindex_dprag._quiet",
    "llamaindex_dprag.llms",
    "llamaindex_dprag.postprocessors",
    "llamaindex_dprag.query_engine",
    "llamaindex_dprag.sources",
    "llamaindex_dprag.units",
    "llamaindex_dprag.vector_stores",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


class SlowEchoLLM(CustomLLM):
    """Answers ``reply:<prompt>`` after a delay that reverses completion order."""

    calls: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="slow-echo")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.calls.append(kwargs)
        return CompletionResponse(text=f"reply:{prompt}")

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        await asyncio.sleep(0.01 * (10 - int(prompt)))
        self.calls.append(kwargs)
        return CompletionResponse(text=f"reply:{prompt}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


def test_text_model_keeps_order_under_concurrency() -> None:
    model = LlamaIndexTextModel(SlowEchoLLM(), max_concurrency=4)
    assert isinstance(model, TextModel)
    prompts = [str(i) for i in range(8)]
    assert model.generate(prompts) == [f"reply:{p}" for p in prompts]
    assert asyncio.run(model.agenerate(prompts)) == [f"reply:{p}" for p in prompts]


def test_text_model_inside_a_running_loop() -> None:
    model = LlamaIndexTextModel(SlowEchoLLM(), max_concurrency=3)

    async def call_sync_from_async() -> list[str]:
        return model.generate(["1", "2", "3"])

    assert asyncio.run(call_sync_from_async()) == ["reply:1", "reply:2", "reply:3"]


def test_text_model_passes_the_length_limit_when_told() -> None:
    llm = SlowEchoLLM()
    LlamaIndexTextModel(llm, max_concurrency=1).generate(["1"], max_new_tokens=5)
    LlamaIndexTextModel(llm, max_concurrency=1, max_tokens_kwarg="max_tokens").generate(
        ["1"], max_new_tokens=5
    )
    assert llm.calls == [{}, {"max_tokens": 5}]


def test_text_model_validation() -> None:
    with pytest.raises(TypeError, match="llm must be a LlamaIndex LLM"):
        LlamaIndexTextModel("gpt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency must be an integer >= 1"):
        LlamaIndexTextModel(MockLLM(), max_concurrency=0)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        LlamaIndexTextModel(QuestionLLM()).generate(["x"], max_new_tokens=0)
    assert "QuestionLLM" in repr(LlamaIndexTextModel(QuestionLLM()))


def _node(node_id: str, score: float | None, **meta: Any) -> NodeWithScore:
    return NodeWithScore(
        node=TextNode(id_=node_id, text=f"text {node_id}", metadata=meta), score=score
    )


def test_units() -> None:
    sourced = TextNode(
        id_="n", text="", relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc")}
    )
    assert node_unit(sourced) == "doc"
    assert node_unit(TextNode(id_="n", text="")) == "n"
    assert node_unit(TextNode(id_="n", text="", metadata={"who": 3}), "who") == "3"
    # without its unit_key a node belongs to no known unit: dropped, never an error
    assert node_unit(TextNode(id_="secret-id", text="secret text"), "who") is None


def test_scores() -> None:
    assert normalise_score(1.2, score_range=(-1.0, 1.0)) == 1.0
    assert normalise_score(0.5, score_direction="distance") == -0.5
    assert math.isnan(normalise_score(None)) and math.isnan(normalise_score(math.inf))
    docs = to_scored_documents([_node("b", 0.7), _node("a", 0.1), _node("c", math.nan)])
    assert [d.id for d in docs[:2]] == ["b", "a"]  # the store's order, never re-sorted
    assert docs[2].is_padding  # a NaN score: dropped, its slot kept
    assert docs[0].text == "text b"
    assert "text b" not in repr(docs[0])


def test_cosine_store_scores_are_cosine_similarities(tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(6, 8)) * rng.uniform(0.1, 10, size=(6, 1))  # arbitrary norms
    store = cosine_faiss_store(dim=8)
    store.add([TextNode(id_=str(i), text="", embedding=v.tolist()) for i, v in enumerate(vectors)])
    query = rng.normal(size=8) * 7
    result = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=6))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = unit @ (query / np.linalg.norm(query))
    got = dict(zip(result.ids, result.similarities, strict=True))
    for i, cos in enumerate(expected):
        assert got[str(i)] == pytest.approx(cos, abs=1e-5)
    assert all(-1.0 - 1e-5 <= s <= 1.0 + 1e-5 for s in result.similarities)
    path = str(tmp_path / "store" / "index.faiss")
    store.persist(persist_path=path)
    from llama_index.vector_stores.faiss import FaissVectorStore

    again = FaissVectorStore.from_persist_path(path)
    reloaded = again.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=6))
    assert reloaded.ids == result.ids
    with pytest.raises(ValueError, match="dim must be an integer >= 1"):
        cosine_faiss_store(dim=0)
