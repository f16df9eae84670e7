"""Quickstart: a typical LangChain RAG app over FAISS, made differentially private.

The app keeps its vector store (langchain-community FAISS, inner product on
unit-norm embeddings), its embeddings and its LLM. One component changes: the
``retriever | prompt | llm`` part becomes a ``DPRAGChain``, and moving between
DP mechanisms changes only ``mechanism=``.

Runs offline: a deterministic hashing embedding stands in for your embedding
model, and the generator is the project's reader model when it is installed
(``dprag_core/assets/reader``), else a tiny random GPT-2 built from a config
(its answers are gibberish; the privacy accounting is real).

    python examples/langchain_quickstart.py --mechanism dpsparsevote   # or dpksa, murag
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import warnings
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget
from dprag_core.models.hf import HFTokenModel
from langchain_dprag import DPRAGChain, LangChainTextModel, faiss_inner_product

warnings.filterwarnings("ignore", category=DeprecationWarning)  # langchain-community's sunset

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


class HashingEmbeddings(Embeddings):
    """A deterministic bag-of-words embedding (swap in your own Embeddings)."""

    def embed_query(self, text: str) -> list[float]:
        vec = [0.0] * 256
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
            vec[h % 256] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


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


def langchain_llm(model: Any, tokenizer: Any) -> Any:
    """The app's LangChain LLM (a local transformers pipeline here)."""
    from langchain_community.llms import HuggingFacePipeline
    from transformers import pipeline

    generate = pipeline(
        "text-generation", model=model, tokenizer=tokenizer, max_new_tokens=8,
        return_full_text=False, do_sample=False,
    )  # fmt: skip
    return HuggingFacePipeline(pipeline=generate)


def build_mechanism(name: str, token_model: HFTokenModel, llm: Any, state: str) -> Mechanism:
    """The one component that differs between DP mechanisms."""
    if name == "dpsparsevote":
        from dprag_core.algorithms.dpvote import DPSparseVote

        return DPSparseVote(
            token_model, m=3, k=2, epsilon=5.0, delta=1e-4, epsilon_token=1.0, max_new_tokens=6
        )
    if name == "dpksa":
        from dprag_core.algorithms.ksa import DPKSA

        return DPKSA(LangChainTextModel(llm), epsilon=5.0, delta=1e-4, n_docs=6)
    if name == "murag":
        from dprag_core.accounting.ledger import SQLiteLedger
        from dprag_core.algorithms import murag
        from dprag_core.algorithms.dpvote import DPSparseVote

        inner = DPSparseVote(  # MuRAG's pure-DP step: exponential-mechanism selection, delta 0
            token_model,
            m=3,
            k=2,
            epsilon=2.0,
            delta=0.0,
            epsilon_token=1.0,
            selection="exponential",
            max_new_tokens=6,
        )
        ledger = SQLiteLedger(state, budget_per_unit=20.0, create=True)
        return murag.MuRAG(inner, ledger=ledger, tau=0.1, epsilon_query=2.0)
    raise ValueError(f"mechanism must be dpsparsevote, dpksa or murag, got {name!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mechanism", default="dpsparsevote", choices=["dpsparsevote", "dpksa", "murag"]
    )
    parser.add_argument(
        "--state",
        default="dprag-quickstart.db",
        help="SQLite file holding the corpus budget and MuRAG's per-patient ledger",
    )
    args = parser.parse_args(argv)

    # --- the app as it was: a FAISS store (inner product, unit-norm embeddings) ----------
    docs = [Document(page_content=t, metadata={"patient": p}) for t, p in RECORDS]
    store = faiss_inner_product(docs, HashingEmbeddings())
    model, tokenizer = load_generator()
    llm = langchain_llm(model, tokenizer)
    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    join = RunnableLambda(lambda found: "\n".join(d.page_content for d in found))
    _non_private_rag = (
        {"context": store.as_retriever() | join, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )  # leaks the records through its answers, its "context" and its traces

    # --- the one change: a DP retriever-plus-generator ------------------------------
    mechanism = build_mechanism(args.mechanism, HFTokenModel(model, tokenizer), llm, args.state)
    dp_rag = DPRAGChain(
        vectorstore=store,  # the same FAISS store (similarity_search_with_score = cosine)
        mechanism=mechanism,
        unit_key="patient",
        # the corpus budget, charged before each query (required): durable and shared
        accountant=SQLiteCorpusAccountant(args.state, total=Budget(50.0, 1e-3), create=True),
    )
    app = dp_rag.pick("answer") | StrOutputParser()  # streams the released tokens

    result = dp_rag.invoke({"question": QUESTION})
    print(f"mechanism: {result.mechanism}")
    print(f"answer: {result.answer!r}")
    print(f"epsilon={result.epsilon:g} delta={result.delta:g}")
    print(f"as an LCEL app: {app.invoke(QUESTION)!r}")


if __name__ == "__main__":
    main()
