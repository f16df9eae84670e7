"""A condensed-question chat path: the history is public input, the documents stay sealed.

A chat turn ("What does she take?") needs the conversation to mean anything.
:func:`condense_question` rewrites it, with **the app's public model**, into a
standalone question from the chat history and the follow-up; only that
question reaches :class:`~langchain_dprag.chain.DPRAGChain`, which retrieves
and answers privately as for any question. The public model sees the history
(the user's own messages and the answers already released, DP outputs) and the
follow-up, never a document, and it is called as an ordinary LangChain model
(traced like any other call: nothing private passes through it). The first
turn (empty history) goes through unchanged, without a model call.

:func:`condensed_chat` composes the two for ``RunnableWithMessageHistory``,
which supplies the whole history under ``history_key``:

>>> from langchain_core.chat_history import InMemoryChatMessageHistory
>>> from langchain_core.runnables.history import RunnableWithMessageHistory
>>> history = InMemoryChatMessageHistory()
>>> app = RunnableWithMessageHistory(
...     condensed_chat(dp_chain, public_llm),  # dp_chain: DPRAGChain(..., output="text")
...     lambda session_id: history,
...     input_messages_key="question",
...     history_messages_key="chat_history",
... )  # doctest: +SKIP
>>> app.invoke({"question": "What does she take?"},
...            {"configurable": {"session_id": "s1"}})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import BasePromptTemplate, ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from dprag_core.validation import strict_keywords
from langchain_dprag.chain import DPRAGChain

__all__ = ["CONDENSE_PROMPT", "condense_question", "condensed_chat"]

CONDENSE_PROMPT = ChatPromptTemplate.from_messages(
    [
        MessagesPlaceholder("chat_history"),
        (
            "human",
            "Given the conversation above, rewrite this follow-up as a standalone question. "
            "Reply with the question only.\n\nFollow-up: {question}",
        ),
    ]
)
"""The default condensing prompt: variables ``chat_history`` (messages) and ``question``."""


@strict_keywords
def condense_question(
    llm: BaseLanguageModel[Any],
    *,
    prompt: BasePromptTemplate[Any] = CONDENSE_PROMPT,
    input_key: str = "question",
    history_key: str = "chat_history",
) -> Runnable[dict[str, Any], str]:
    """The standalone question of a chat turn ``{input_key: ..., history_key: [...]}``.

    ``prompt`` takes ``chat_history`` and ``question``; ``llm`` is the app's
    public model (it never sees a document). An empty history returns the
    question as it is.

    >>> from langchain_core.language_models import FakeListChatModel
    >>> condense = condense_question(FakeListChatModel(responses=["What does Alice take?"]))
    >>> condense.invoke({"question": "Who?", "chat_history": []})
    'Who?'
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> turn = [HumanMessage("Who has a migraine?"), AIMessage("Alice.")]
    >>> condense.invoke({"question": "What does she take?", "chat_history": turn})
    'What does Alice take?'
    """

    def fields(turn: dict[str, Any]) -> dict[str, Any]:
        return {"chat_history": turn[history_key], "question": turn[input_key]}

    rewrite = RunnableLambda(fields) | prompt | llm | StrOutputParser()

    def route(turn: dict[str, Any]) -> Any:
        return rewrite if turn.get(history_key) else turn[input_key]

    return RunnableLambda(route).with_config(run_name="condense_question")


@strict_keywords
def condensed_chat(
    chain: DPRAGChain,
    llm: BaseLanguageModel[Any],
    *,
    prompt: BasePromptTemplate[Any] = CONDENSE_PROMPT,
    history_key: str = "chat_history",
) -> Runnable[dict[str, Any], Any]:
    """``chain`` answering the condensed question of each turn (the other keys pass through).

    The turn's ``chain.input_key`` is replaced by :func:`condense_question`'s
    standalone question. The answer comes in a form a chat history records:
    ``output="text"`` as it is (``RunnableWithMessageHistory`` without an
    ``output_messages_key``), ``"dict"`` as it is (with
    ``output_messages_key=chain.output_key``), and the default ``"object"``
    form as text (a ``DPRAGOutput`` is no message: the history would drop the
    turn, with an error only in a callback log).
    """
    if not isinstance(chain, DPRAGChain):
        raise TypeError(f"chain must be a DPRAGChain, got {type(chain).__name__}")
    condense = condense_question(
        llm, prompt=prompt, input_key=chain.input_key, history_key=history_key
    )
    answering = chain.model_copy(update={"output": "text"}) if chain.output == "object" else chain
    return RunnablePassthrough.assign(**{chain.input_key: condense}) | answering
