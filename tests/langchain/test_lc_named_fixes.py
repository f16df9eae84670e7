"""Errors on the documented paths name the fix (issue 27 item 5).

``DPRAGChain(...) | StrOutputParser()`` with the default output form used to fail
inside the parser with a bare pydantic error; it now composes the text form (the
parser reads text), and a dict-form chain is refused when composed, naming
``output='text'``.
"""

from __future__ import annotations

import pytest
from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import QUESTION, budget
from toy_mechanisms import ToyMechanism

from langchain_dprag import DPRAGChain


def _chain(store: InMemoryVectorStore, **kw: object) -> DPRAGChain:
    return DPRAGChain(vectorstore=store, mechanism=ToyMechanism(k=3), accountant=budget(), **kw)


async def test_the_default_form_composes_with_a_string_parser(store: InMemoryVectorStore) -> None:
    app = _chain(store) | StrOutputParser()
    assert app.invoke(QUESTION) == "3 candidates"
    assert [c for c in app.stream(QUESTION) if c] == ["3", " candidates"]
    assert [c async for c in app.astream(QUESTION) if c] == ["3", " candidates"]
    parsed = _chain(store) | (StrOutputParser() | RunnableLambda(str.upper))
    assert parsed.invoke(QUESTION) == "3 CANDIDATES"


def test_the_dict_form_is_refused_when_composed_naming_the_fix(
    store: InMemoryVectorStore,
) -> None:
    for parser in (StrOutputParser(), JsonOutputParser()):
        with pytest.raises(TypeError, match="output='text'"):
            _chain(store, output="dict") | parser
    assert (_chain(store, output="dict").pick("answer") | StrOutputParser()).invoke(
        QUESTION
    ) == "3 candidates"
