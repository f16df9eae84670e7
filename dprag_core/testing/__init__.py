"""Test kits a third party subclasses to prove an integration: pytest suites, importable.

``dprag_core.testing.stores``: the store suites (score semantics, exact
ranking, ties, filters, partitioned search, D vs D + x) for a vector store
registered with the LangChain or LlamaIndex store registry (docs/new-store.md).
The modules import pytest and the framework they test; ``import dprag_core``
imports none of them.
"""
