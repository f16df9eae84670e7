"""Shared pieces of the LangChain adapter tests: a deterministic embedding, a private
corpus with a canary, a worst-case (echoing) chat model, a recording callback handler.
Every dprag mechanism, built small, is in the shared table (tests/mechanism_table.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import (
    BaseCallbackHandler,
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever

from langchain_dprag._compat import message_text

SECRET = "zq7canary4417xylophone"
QUESTION = "What is the access code of Zora Quillfeather?"

PUBLIC_FACTS = [
    ("Alice Martin was diagnosed with migraine and treated with aspirin.", "p1"),
    ("Alice Martin takes aspirin when the migraine starts.", "p1"),
    ("Bob Durand has asthma; his doctor prescribed salbutamol.", "p2"),
    ("Chloe Lefevre suffers from diabetes and takes metformin.", "p3"),
    ("David Moreau has hypertension and takes lisinopril.", "p4"),
    ("Emma Petit was treated for migraine with ibuprofen.", "p5"),
    ("Farid Benali has asthma and uses a salbutamol inhaler.", "p6"),
    ("Gina Rossi takes metformin for her diabetes.", "p7"),
    ("Hugo Blanc was treated with aspirin for a migraine.", "p8"),
    ("Ines Garnier has hypertension; lisinopril was prescribed.", "p9"),
]
SECRET_DOC = (
    f"Zora Quillfeather access code {SECRET}; Zora Quillfeather keeps the access code private.",
    "p10",
)


def corpus() -> list[Document]:
    """Eleven private records (two chunks of patient p1), one holding the canary."""
    return [
        Document(page_content=text, id=f"d{i}", metadata={"patient": unit})
        for i, (text, unit) in enumerate([*PUBLIC_FACTS, SECRET_DOC])
    ]


class HashingEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings (signed feature hashing), unit norm."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def embed_query(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
            vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


class EchoChatModel(BaseChatModel):
    """The worst case for privacy: answers with its whole prompt (or fails quoting it)."""

    fail: bool = False

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = message_text(messages[-1])
        self.seen(stop, kwargs)
        if self.fail:
            raise ValueError(f"model rejected the prompt {text!r}")
        return ChatResult(generations=[ChatGeneration(message=self.reply(text))])

    def seen(self, stop: list[str] | None, kwargs: dict[str, Any]) -> None:
        """Hook: a call's stop sequences and keywords (subclasses record or fail here)."""

    def reply(self, text: str) -> AIMessage:
        """Hook: the answer message to ``text`` (the echo)."""
        return AIMessage(content=text)


class FailingTokenModel:
    """A TokenModel whose prefill fails quoting its prompts (exception side door)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids

    def encode(self, text: str) -> list[int]:
        return list(self.inner.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.inner.decode(ids))

    def prefill(self, prompts: Sequence[str]) -> Any:
        raise RuntimeError(f"cannot prefill {list(prompts)!r}")

    prefill_logprobs = prefill


class CountingRetriever(BaseRetriever):
    """A user's retriever (scores in metadata unless ``scores=False``) counting its calls."""

    store: Any
    scores: bool = True
    calls: int = 0

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 4
    ) -> list[Document]:
        self.calls += 1
        pairs = self.store.similarity_search_with_score(query, k=k)
        return [
            Document(
                page_content=d.page_content,
                id=d.id,
                metadata={**d.metadata, "score": s} if self.scores else d.metadata,
            )
            for d, s in pairs
        ]


def _record(name: str) -> Callable[..., None]:
    def method(self: RecordingHandler, *args: Any, **kwargs: Any) -> None:
        self.records.append(f"{name} {args!r} {kwargs!r}")

    return method


class RecordingHandler(BaseCallbackHandler):
    """Records the repr of every callback it receives."""

    def __init__(self) -> None:
        self.records: list[str] = []

    def text(self) -> str:
        return "\n".join(self.records)


for _name in dir(BaseCallbackHandler):
    if _name.startswith("on_"):
        setattr(RecordingHandler, _name, _record(_name))


def dump(obj: Any) -> str:
    """Everything an object would show: json (repr for the rest) plus repr."""
    return json.dumps(obj, default=repr) + repr(obj)


def budget() -> Any:
    """A large in-memory corpus budget: enough for any test, refused by none."""
    from dprag_core.accounting.accountant import InMemoryCorpusAccountant
    from dprag_core.budget import Budget

    return InMemoryCorpusAccountant(Budget(1e6, 0.5))
