"""Quickstart: a LlamaIndex RAG app over FAISS, made differentially private.

The app keeps its documents, its ``VectorStoreIndex`` (a FAISS store, inner
product on normalised embeddings, so scores are cosine similarities), its
embedding model and its LLM. One line changes: ``index.as_query_engine()``
becomes ``DPQueryEngine.from_index(index, mechanism=..., budget=...)``, and
moving between DP mechanisms changes only ``mechanism=``.

Runs offline: a deterministic hashing embedding stands in for your embedding
model, and the generator is the project's reader model when it is installed
(``dprag_core/assets/reader``), else a tiny random GPT-2 built from a config
(its answers are gibberish; the privacy accounting is real).

    python examples/llamaindex_quickstart.py --mechanism dpsparsevote  # or dpksa, dpicl, murag
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
from pathlib import Path
from typing import Any

from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget
from dprag_core.models.hf import HFTextModel, HFTokenModel
from llamaindex_dprag import COSINE_RANGE, DPQueryEngine, LlamaIndexTextModel, cosine_faiss_store

RECORDS = [
    ("Alice Martin was diagnosed with migraine and treated with aspirin.", "alice"),
    ("Bob Durand has asthma; his doctor prescribed salbutamol.", "bob"),
    ("Chloe Lefevre suffers from diabetes and takes metformin.", "chloe"),
    ("Emma Petit was treated for migraine with aspirin.", "emma"),
    ("Hugo Blanc takes aspirin when his migraine starts.", "hugo"),
    ("Farid Benali has asthma and uses a salbutamol inhaler.", "farid"),
]
QUESTION = "Which drug treats migraine?"
READER = Path(__file__).resolve().parents[1] / "dprag_core" / "assets" / "reader"
DIM = 256


class HashingEmbedding(BaseEmbedding):
    """A deterministic bag-of-words embedding (swap in your own embed model)."""

    @classmethod
    def class_name(cls) -> str:
        return "HashingEmbedding"

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * DIM
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
            vec[h % DIM] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed(text)


class LocalLLM(CustomLLM):
    """The app's LLM: a local transformers model (greedy). Any LlamaIndex LLM works."""

    _model: Any = PrivateAttr()

    def __init__(self, model: HFTextModel) -> None:
        super().__init__()
        self._model = model

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="local-reader")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._model.generate([prompt], max_new_tokens=8)[0])

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


def load_generator() -> tuple[Any, Any]:
    """The reader model when installed, else a tiny random GPT-2 (model, tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (READER / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(READER), AutoTokenizer.from_pretrained(READER)
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([t for t, _ in RECORDS] + [QUESTION], trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=2, n_head=4,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    return GPT2LMHeadModel(config).eval(), tok


def build_mechanism(name: str, token_model: HFTokenModel, state: str) -> Mechanism:
    """The one component that differs between DP mechanisms."""
    if name == "dpsparsevote":
        from dprag_core.algorithms.dpvote import DPSparseVote

        return DPSparseVote(
            token_model, m=3, k=2, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=6
        )
    if name == "dpksa":
        from dprag_core.algorithms.ksa import DPKSA

        # text-level: the app's own LlamaIndex LLM, unchanged
        return DPKSA(LlamaIndexTextModel(Settings.llm), epsilon=5.0, delta=1e-4, n_docs=6)
    if name == "dpicl":
        from dprag_core.algorithms.icl import DPICL

        return DPICL(token_model, epsilon=5.0, delta=1e-4, max_new_tokens=6, k=3)
    if name == "murag":
        from dprag_core.accounting.ledger import SQLiteLedger
        from dprag_core.algorithms.dpvote import DPSparseVote
        from dprag_core.algorithms.murag import MuRAG

        # MuRAG's inner mechanism: pure epsilon-DP (exponential selection, delta 0)
        inner = DPSparseVote(
            token_model, m=3, k=2, epsilon=2.0, delta=0.0, epsilon_token=1.0,
            selection="exponential", max_new_tokens=6,
        )  # fmt: skip
        ledger = SQLiteLedger(
            state, budget_per_unit=20.0, create=True
        )  # every patient's own budget
        return MuRAG(inner, ledger=ledger, tau=0.1, epsilon_query=2.0)
    raise ValueError(f"mechanism must be dpsparsevote, dpksa, dpicl or murag, got {name!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--mechanism", default="dpsparsevote", choices=["dpsparsevote", "dpksa", "dpicl", "murag"]
    )
    parser.add_argument(
        "--state",
        default="dprag-quickstart.db",
        help="SQLite file holding the corpus budget and MuRAG's per-patient ledger",
    )
    args = parser.parse_args(argv)

    # --- the app as it was: documents in a FAISS-backed VectorStoreIndex ------------------
    model, tokenizer = load_generator()
    Settings.embed_model = HashingEmbedding()
    Settings.llm = LocalLLM(HFTextModel(model, tokenizer))
    documents = [Document(text=t, metadata={"patient": p}) for t, p in RECORDS]
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=DIM))
    index = VectorStoreIndex.from_documents(documents, storage_context=storage)
    _non_private = index.as_query_engine()  # its answers and source_nodes leak the records

    # --- the one change: a DP query engine ----------------------------------------------
    engine = DPQueryEngine.from_index(
        index,
        mechanism=build_mechanism(args.mechanism, HFTokenModel(model, tokenizer), args.state),
        # the corpus budget, charged before each query (required): durable and shared
        budget=SQLiteCorpusAccountant(args.state, total=Budget(50.0, 1e-3), create=True),
        score_range=COSINE_RANGE,  # public range of the cosine scores
        unit_key="patient",  # one patient = one privacy unit
    )
    response = engine.query(QUESTION)
    meta = response.metadata or {}
    print(f"mechanism: {meta['mechanism']}")
    print(f"answer: {response.response!r}")
    print(f"epsilon={meta['epsilon']:g} delta={meta['delta']:g}")
    print(f"source_nodes: {response.source_nodes}")  # empty: the records stay private

    engine.streaming = True  # token by token as DPSparseVote releases them
    streamed = engine.query(QUESTION)
    print("streamed:", "".join(streamed.response_gen))  # type: ignore[union-attr]
    spent = engine.accountant.spent_epsilon if engine.accountant else 0.0
    print(f"corpus budget spent: epsilon={spent:g}")


if __name__ == "__main__":
    main()
